"""Budgets of what a tenant supplies: log searches, payloads, and a retired setting whose
presence is refused (read here; `base` takes them as they are)."""

from project.settings.env import env_float, env_int, env_list

# What a tenant supplies at run time and the platform stores (scheduler_app/services/
# payload_quota.py): an event's payload and a trigger's parameters, measured as compact JSON.
PAYLOADS = {
    # One payload or set of parameters; over it, 413 `payload_too_large` naming the field.
    # (The request body as a whole is capped first, by MAX_REQUEST_BODY_BYTES.)
    "MAX_BYTES": env_int("PAYLOAD_MAX_BYTES", 256 * 1024),
    # What one tenant may store of them per rolling window (an event counts once for itself
    # and once for each run it starts); over it, 429 `payload_quota_exceeded` + Retry-After.
    "TENANT_BYTES_PER_WINDOW": env_int("PAYLOAD_TENANT_BYTES_PER_WINDOW", 256 * 1024**2),
    "WINDOW_SECONDS": env_int("PAYLOAD_QUOTA_WINDOW_SECONDS", 3600),
}

# Checkpoints (`context.checkpoint(state)`, a shell task's checkpoint file; scheduler_app/
# services/checkpoints.py): what one run may keep, and what one tenant may write.
CHECKPOINTS = {
    # One checkpoint, as compact JSON (or the file's bytes); over it the handler's call raises
    # CheckpointRefused (a shell file over it is not kept, and the run's log says so).
    "MAX_BYTES": env_int("CHECKPOINT_MAX_BYTES", 64 * 1024),
    # Bytes one tenant may write in checkpoints per rolling window (each save counts).
    "TENANT_BYTES_PER_WINDOW": env_int("CHECKPOINT_TENANT_BYTES_PER_WINDOW", 256 * 1024**2),
    "WINDOW_SECONDS": env_int("CHECKPOINT_WINDOW_SECONDS", 3600),
    # Checkpoints not written for this long are deleted by the beat's housekeeping.
    "RETENTION_SECONDS": env_int("CHECKPOINT_RETENTION_SECONDS", 7 * 86400),
}

# Log search (GET /api/v1/executions?log_contains=..., the task page's search box).
LOG_SEARCH = {
    # Every statement of one search together is cut after this long (SET LOCAL
    # statement_timeout, renewed with what is left before each statement): the answer is a
    # 503 `log_search_timeout` asking to narrow the search.
    "TIMEOUT_SECONDS": env_float("LOG_SEARCH_TIMEOUT_SECONDS", 2.0),
    # Searches of one tenant running at once (API and dashboard together); the next one
    # answers 429 `too_many_log_searches` with Retry-After. Counted in Redis; without Redis
    # searches are refused (503), never let through uncounted.
    "MAX_CONCURRENT_PER_TENANT": env_int("LOG_SEARCH_MAX_CONCURRENT_PER_TENANT", 4),
}

# Retired: one list of internal hosts every tenant's http tasks could reach. A tenant's own
# list is set by the operator (Tenant.webhook_allowed_hosts, `manage.py tenant_webhook_hosts`);
# set here, the variable stops `manage.py` commands (system check scheduler.E007).
RETIRED_WEBHOOK_ALLOWED_HOSTS = env_list("WEBHOOK_ALLOWED_HOSTS", [])
