"""Fixtures that start real Celery workers and beat schedulers against the test database."""

from __future__ import annotations

import pytest

from tests.processes import start_beat, start_worker

FAST_WORKER = {"WORKER_KILL_GRACE_SECONDS": "1", "WORKER_LEASE_SECONDS": "10"}
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
def live_worker(django_db_setup, django_db_blocker):
    """One real prefork worker on every tier, shared by the integration tests of a process."""
    worker = start_worker(name="w-main", concurrency=4, env_overrides=FAST_WORKER)
    yield worker
    worker.stop()
    if worker.process.returncode not in (0, None):
        print(worker.log()[-3000:])


@pytest.fixture
def beats(transactional_db):
    """Start beat schedulers on demand; all stopped (before the tables are flushed)."""
    started = []

    def start(node_id: str, **env: str):
        beat = start_beat(node_id=node_id, env_overrides={**FAST_BEAT, **env})
        started.append(beat)
        return beat

    yield start
    for beat in started:
        beat.stop(timeout=10)


def dump_logs(*processes) -> str:
    return "\n".join(f"----- {p.name}\n{p.log()[-3000:]}" for p in processes)
