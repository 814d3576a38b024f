"""The worker fleet's settings (imported by `base`): registry, heartbeats, shutdown, live
log streams, sticky routing, retry budgets."""

from __future__ import annotations

from project.settings.env import env_bool, env_float, env_int, env_str
from scheduler_app.tenant_pools import tenant_pools_parse

# --- Worker fleet: registry, heartbeats, shutdown, live logs, sticky routing, budgets ---
FLEET = {
    "HEARTBEAT_SECONDS": env_float("WORKER_HEARTBEAT_SECONDS", 10.0),
    # A worker whose last heartbeat is older than this many intervals is dead.
    "MISSED_HEARTBEATS_DEAD": env_int("WORKER_MISSED_HEARTBEATS_DEAD", 2),
    # SIGTERM: running runs get this long to finish; the rest go back to pending.
    "SHUTDOWN_DEADLINE_SECONDS": env_float("WORKER_SHUTDOWN_DEADLINE_SECONDS", 300.0),
    # ... and this long before that deadline (at once when it is at least the deadline: spot
    # preemption) the running handlers are told (`context.preempted`, a shell task gets
    # SIGTERM) so they can checkpoint and stop; what still runs at the deadline is handed back.
    "PREEMPT_GRACE_SECONDS": env_float("WORKER_PREEMPT_GRACE_SECONDS", 30.0),
    # A run whose worker died (heartbeats missed, lease expired) goes back to the queue as the
    # same attempt this many times; the next loss fails it (`worker_lost`) and spends a retry.
    "LOST_REQUEUES": env_int("WORKER_LOST_REQUEUES", 2),
    # How often a running execution checks for a cancel request (Redis key).
    "CANCEL_POLL_SECONDS": env_float("WORKER_CANCEL_POLL_SECONDS", 0.5),
    # Live log tail: a capped Redis stream per execution (LIVE_LOGS has its byte budgets),
    # expiring this long after its last write (a dead worker's tail goes by itself).
    "LOG_STREAM_MAX_LINES": env_int("WORKER_LOG_STREAM_MAX_LINES", 10000),
    "LOG_STREAM_TTL_SECONDS": env_int("WORKER_LOG_STREAM_TTL_SECONDS", 3600),
    # Retries may be at most this share of the executions started per minute ...
    "RETRY_BUDGET_RATIO": env_float("RETRY_BUDGET_RATIO", 0.2),
    # ... but never fewer than this many per minute (a quiet system can still retry).
    "RETRY_BUDGET_MIN_PER_MINUTE": env_int("RETRY_BUDGET_MIN_PER_MINUTE", 10),
    "STICKY_ROUTING": env_bool("WORKER_STICKY_ROUTING", True),
    # Shell handlers: run as this user when the worker runs as root ("" = as the worker).
    "SHELL_RUN_AS_USER": env_str("WORKER_SHELL_RUN_AS_USER", ""),
    # Waiting runs per tier above which the queues endpoint recommends more workers.
    "SCALE_THRESHOLDS": {
        "critical": env_int("SCALE_THRESHOLD_CRITICAL", 500),
        "normal": env_int("SCALE_THRESHOLD_NORMAL", 1000),
        "bulk": env_int("SCALE_THRESHOLD_BULK", 5000),
    },
}

# --- Live log streams (Server-Sent Events from the web tier) -------------------------
LOG_STREAMS = {
    # Open streams per tenant (API and dashboard together); the next one answers 429.
    "MAX_OPEN_PER_TENANT": env_int("LOG_STREAMS_MAX_OPEN_PER_TENANT", 50),
    # An open stream renews its place well within this lease; the places of a killed web
    # process free themselves when their leases end.
    "LEASE_SECONDS": env_float("LOG_STREAMS_LEASE_SECONDS", 60.0),
}

# --- Tenant worker pools (docs/deployment/tenant-pools.md) ---------------------------------
# "acme=8,globex=4": these tenants' runs go to queues of their own (tenant.<slug>.<tier>),
# served only by workers started for them (`manage.py tenant_worker <slug>`), at most that
# many running at once (checked at the claim). Every process reads it: the rings route by
# it, the workers' claims cap by it. Empty: every tenant on the shared pools.
WORKER_TENANT_POOLS = tenant_pools_parse(env_str("WORKER_TENANT_POOLS", ""))
