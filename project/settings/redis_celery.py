"""Redis and Celery settings (imported by `base`): where each process connects, as which
Redis user, and where live log tails go."""

from __future__ import annotations

from project.settings.env import (
    env_bool,
    env_int,
    env_list,
    env_secret,
    env_str,
    redis_neighbour_database_url,
    redis_url_with_credentials,
    sentinel_url,
)

# --- Redis and Celery -------------------------------------------------------
# Each process of a deployment connects as its own Redis ACL user (deploy/redis/: web, beat,
# worker, flower), named by REDIS_USERNAME, with REDIS_PASSWORD (or REDIS_PASSWORD_FILE);
# they go into REDIS_URL and LIVE_LOGS_REDIS_URL unless those carry credentials themselves.
REDIS_USERNAME = env_str("REDIS_USERNAME", "")
_REDIS_PASSWORD = env_secret("REDIS_PASSWORD", "")
REDIS_URL = redis_url_with_credentials(
    env_secret("REDIS_URL", "redis://127.0.0.1:6379/0"),
    username=REDIS_USERNAME,
    password=_REDIS_PASSWORD,
)
# Live log tails (scheduler_app/live_logs.py) go to a Redis apart from the broker, so that a
# flood of task output cannot fill the Redis dispatch needs. Default: the next database of
# REDIS_URL's server (`make run`); compose and Kubernetes run an instance of its own for it.
LIVE_LOGS_REDIS_URL_DERIVED = not env_secret("LIVE_LOGS_REDIS_URL", "")
LIVE_LOGS_REDIS_URL = redis_url_with_credentials(
    env_secret("LIVE_LOGS_REDIS_URL", "") or redis_neighbour_database_url(REDIS_URL),
    username=REDIS_USERNAME,
    password=_REDIS_PASSWORD,
)
# Every tenant supplies its runs' output: a budget per run and per tenant (all its running
# runs' tails together) bounds what tails hold in Redis. Past it a tail says it was cut;
# the stored log (WORKER_LOG_MAX_BYTES) is the record and keeps the lines. A tail is
# deleted this long after its run ended (followers then read the stored log).
LIVE_LOGS = {
    "RUN_MAX_BYTES": env_int("LIVE_LOG_RUN_MAX_BYTES", 1024 * 1024),
    "TENANT_MAX_BYTES": env_int("LIVE_LOG_TENANT_MAX_BYTES", 16 * 1024 * 1024),
    "ENDED_TTL_SECONDS": env_int("LIVE_LOG_ENDED_TTL_SECONDS", 15),
}
# Redis behind Sentinel: the sentinels (host:port, comma separated) and the name of the
# master they watch. Then every Redis client (broker, result backend, leader lock, counters,
# live logs) asks them for the current master and follows a failover; REDIS_URL gives only
# the master's password and database number. REDIS_SENTINEL_PASSWORD: the sentinels' own.
REDIS_SENTINELS = env_list("REDIS_SENTINELS", [])
REDIS_SENTINEL_MASTER = env_str("REDIS_SENTINEL_MASTER", "mymaster")
REDIS_SENTINEL_PASSWORD = env_str("REDIS_SENTINEL_PASSWORD", "")
# What Celery connects with: the sentinel:// form kombu and the result backend take.
_CELERY_REDIS_URL = (
    sentinel_url(REDIS_SENTINELS, redis_url=REDIS_URL) if REDIS_SENTINELS else REDIS_URL
)
_SENTINEL_OPTIONS = (
    {
        "master_name": REDIS_SENTINEL_MASTER,
        "sentinel_kwargs": {"password": REDIS_SENTINEL_PASSWORD or None},
    }
    if REDIS_SENTINELS
    else {}
)


def _with_credentials(url: str) -> str:
    """An explicit broker or result URL of Redis gets the process's user too."""
    if not url.startswith(("redis://", "rediss://")):
        return url
    return redis_url_with_credentials(url, username=REDIS_USERNAME, password=_REDIS_PASSWORD)


CELERY_BROKER_URL = _with_credentials(env_str("CELERY_BROKER_URL", _CELERY_REDIS_URL))
# Results live in PostgreSQL. The result backend exists only for the DAG engine's chords
# (fan-out shards count themselves done there); every other task ignores its result.
CELERY_RESULT_BACKEND = _with_credentials(env_str("CELERY_RESULT_BACKEND", _CELERY_REDIS_URL))
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = dict(_SENTINEL_OPTIONS)
CELERY_RESULT_EXPIRES = env_int("CELERY_RESULT_EXPIRES", 86400)
CELERY_TASK_IGNORE_RESULT = True
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TIMEZONE = "UTC"
CELERY_ENABLE_UTC = True
# Late ack: a message a dead worker had taken comes back; the claim makes it once per attempt.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "normal"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Celery's consumer, reconnecting to the broker at most 5 s apart instead of kombu's 30 s, so
# a worker takes runs again within seconds of Redis coming back (workers/consumer.py).
CELERY_WORKER_CONSUMER = "workers.consumer:Consumer"
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int("BROKER_VISIBILITY_TIMEOUT", 7200),
    "global_keyprefix": env_str("BROKER_KEY_PREFIX", ""),
    **_SENTINEL_OPTIONS,
}
CELERY_WORKER_SEND_TASK_EVENTS = env_bool("CELERY_SEND_EVENTS", True)
CELERY_TASK_SEND_SENT_EVENT = False
CELERY_BEAT_SCHEDULER = "beat:LeaderScheduler"
CELERY_BEAT_MAX_LOOP_INTERVAL = 1
# Celery's Django fixup closes every database connection before and after each task unless
# this is set, so each run paid for a new PostgreSQL connection (a backend process forked per
# run: more CPU than the run itself). With it a pool process keeps its connection and Celery
# recycles it every this many tasks; Django's CONN_MAX_AGE and health checks still apply,
# since every task starts with close_old_connections (project/celery.py).
CELERY_DB_REUSE_MAX = env_int("CELERY_DB_REUSE_MAX", 1000)
