"""schedctl and the SDK against the real stack: pytest-django's live server (the API, in a
thread of the test process) and a real Celery worker reading the broker queues of a key
prefix of its own, so that only this suite's runs reach it."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.conftest import FAST_WORKER
from tests.processes import ROOT, broker_key_prefix, quiesce, start_worker

PASSWORD = "pw-123456"


@pytest.fixture(scope="session")
def cli_worker(django_db_setup, django_db_blocker):
    prefix = f"cli-{uuid.uuid4().hex[:10]}:"
    worker = start_worker(
        name="w-cli", concurrency=2, env_overrides={**FAST_WORKER, "BROKER_KEY_PREFIX": prefix}
    )
    yield worker, prefix
    worker.stop()


@dataclass
class Stack:
    url: str
    username: str
    tenant_slug: str
    worker: object


@pytest.fixture
def stack(live_server, transactional_db, cli_worker):
    """A tenant with an admin, the live API, and the worker; while the test runs, this
    process (the live server's thread included) publishes to the worker's queues."""
    from scheduler_app.services.tenants import tenant_create_with_admin

    worker, prefix = cli_worker
    tenant_create_with_admin(slug="acme", username="acme-admin", password=PASSWORD)
    with broker_key_prefix(prefix):
        yield Stack(url=live_server.url, username="acme-admin", tenant_slug="acme", worker=worker)
    quiesce(prefix)  # a DAG's last nodes may still be running: not while the tables are flushed


@pytest.fixture
def cli_env(tmp_path) -> dict[str, str]:
    """The environment schedctl runs in: a config dir of its own, the password given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCHEDCTL_", "DJANGO_"))}
    env["SCHEDCTL_CONFIG_DIR"] = str(tmp_path / "config")
    env["SCHEDCTL_PASSWORD"] = PASSWORD
    env["PYTHONPATH"] = str(ROOT)
    return env


def run_schedctl(
    *args: str, env: dict[str, str], timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """schedctl as a real process (`python -m schedctl`: the same entry point as the
    console script, which tests/cli/test_console_script.py checks is installed)."""
    return subprocess.run(
        [sys.executable, "-m", "schedctl", *args],
        cwd=cwd or ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
