"""Fixtures that start real Celery workers and beat schedulers against the test database."""

from __future__ import annotations

import uuid

import pytest
from django.conf import settings

from tests.processes import broker_key_prefix, quiesce, start_beat, start_worker, stop_all

FAST_WORKER = {
    "WORKER_KILL_GRACE_SECONDS": "1",
    "WORKER_LEASE_SECONDS": "10",
    # Each stored log reads its tenant's log bytes afresh: a test that lowers the quota sees
    # the next run cut without waiting out the worker's cached reading.
    "LOG_QUOTA_CACHE_SECONDS": "0",
}
FAST_BEAT = {
    "SCHEDULER_LOCK_TTL": "1.5",
    "SCHEDULER_LOCK_TRY_SECONDS": "0.25",
    "SCHEDULER_TICK_SECONDS": "0.2",
    "SCHEDULER_HOUSEKEEPING_SECONDS": "1",
    "SCHEDULER_REQUEUE_GRACE": "30",
}


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def shared_worker(django_db_setup, django_db_blocker):
    """One real prefork worker on every tier, shared by the integration tests of a process,
    reading broker queues under a key prefix of its own (see `live_worker`)."""
    prefix = f"shared-{uuid.uuid4().hex[:10]}:"
    worker = start_worker(
        name="w-main",
        concurrency=4,
        # The worker holds the platform's keys in its environment, as in production (the same
        # values as this process): the hostile-tenant tests check that no task can read them.
        env_overrides={
            **FAST_WORKER,
            "BROKER_KEY_PREFIX": prefix,
            "SECRET_KEY": settings.SECRET_KEY,
        },
    )
    yield worker, prefix
    worker.stop()
    if worker.process.returncode not in (0, None):
        print(worker.log()[-3000:])


@pytest.fixture
def live_worker(shared_worker):
    """The shared worker, for this test: while it runs, this process and the beats it starts
    publish to the shared worker's queues. Every other test publishes where that worker does
    not read, so it can never take the runs of a test that plays the worker itself or reads
    its runs' states (it did, in CI, before it had a prefix of its own)."""
    worker, prefix = shared_worker
    with broker_key_prefix(prefix):
        yield worker
    quiesce(prefix)


@pytest.fixture
def beats(transactional_db):
    """Start beat schedulers on demand; all stopped (before the tables are flushed)."""
    started = []

    def start(node_id: str, **env: str):
        beat = start_beat(node_id=node_id, env_overrides={**FAST_BEAT, **env})
        started.append(beat)
        return beat

    yield start
    # Side by side: each beat's graceful stop (releasing its locks) overlaps the others'.
    stop_all(started, timeout=10)


def dump_logs(*processes) -> str:
    return "\n".join(f"----- {p.name}\n{p.log()[-3000:]}" for p in processes)
