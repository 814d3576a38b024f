"""The beat's and the worker's commands as `make run` starts them (devstack/localstack.py).

Kept apart from the stack's launcher, with no Django, so that what measures the stack a user
starts (bench/stack_defaults.py) reads the same commands instead of a copy of them."""

from __future__ import annotations

# Every tier on the one local worker; compose runs a worker per tier (docker-compose.yml).
LOCAL_WORKER_QUEUES = "critical,normal,bulk"
LOCAL_WORKER_CONCURRENCY = 2
LOCAL_WORKER_NAME = "local@%h"
LOG_LEVEL = "INFO"


def beat_command(python: str) -> list[str]:
    """One beat; its scheduler class is the app's default (CELERY_BEAT_SCHEDULER)."""
    return [python, "-m", "celery", "-A", "project", "beat", "-l", LOG_LEVEL]


def worker_command(
    python: str,
    *,
    queues: str = LOCAL_WORKER_QUEUES,
    concurrency: int = LOCAL_WORKER_CONCURRENCY,
    name: str = LOCAL_WORKER_NAME,
) -> list[str]:
    """One prefork worker (Celery's default pool) with gossip, mingle and heartbeat on."""
    return [
        python,
        "-m",
        "celery",
        "-A",
        "project",
        "worker",
        "-Q",
        queues,
        "-c",
        str(concurrency),
        "-l",
        LOG_LEVEL,
        "-n",
        name,
    ]
