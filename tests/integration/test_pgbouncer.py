"""The integration core (lifecycle, leadership, DAG runs) through PgBouncer in transaction
pooling mode: a private PgBouncer (pool of 4 server connections) in front of the test
PostgreSQL, and those suites run again in a pytest of their own whose every process (the
test, its beats, its workers) connects through it with DATABASE_TRANSACTION_POOLING=true.
Without that setting the same run fails (prepared statements meet other clients' server
connections)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid

import pytest
from django.conf import settings

from tests.pgbouncer import pgbouncer
from tests.processes import ROOT

pytestmark = [
    pytest.mark.slow,
    # Needs the test PostgreSQL (and is skipped with the suites that do when it is missing).
    pytest.mark.usefixtures("django_db_setup"),
    pytest.mark.needs_os_tool("pgbouncer"),
]

CORE = [
    "tests/integration/test_run_lifecycle.py::test_an_interval_task_fires_repeatedly_and_succeeds",
    "tests/integration/test_run_lifecycle.py::"
    "test_a_failing_task_is_retried_with_its_backoff_then_dead_lettered",
    "tests/integration/test_run_lifecycle.py::test_the_same_execution_delivered_many_times_runs_once",
    "tests/integration/test_beat_leadership.py::"
    "test_killing_the_leader_hands_firing_to_the_standby_within_the_lock_ttl",
    "tests/integration/test_dag_runs.py::test_diamond_runs_in_order_and_passes_results",
    "tests/integration/test_dag_runs.py::test_a_50_item_map_over_joins_results_in_item_order",
    "tests/integration/test_dag_runs.py::test_the_beat_leader_fires_a_scheduled_dag",
]


def test_the_integration_core_passes_through_pgbouncer_in_transaction_mode():
    database = settings.DATABASES["default"]
    run_id = uuid.uuid4().hex[:10]
    with pgbouncer(
        upstream_host=database.get("HOST") or "127.0.0.1",
        upstream_port=int(database.get("PORT") or 5432),
        user=database.get("USER") or "postgres",
    ) as bouncer:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("PYTEST_", "DJANGO_"))
        }
        env.update(
            DJANGO_SETTINGS_MODULE="project.settings.test",
            SCHEDULER_TEST_RUN_ID=run_id,
            DATABASE_URL=bouncer.url("postgres", user=database.get("USER") or "postgres"),
            DATABASE_TRANSACTION_POOLING="true",
        )
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", "-x", *CORE],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        log = bouncer.log()
    output = result.stdout[-6000:] + result.stderr[-3000:]
    assert result.returncode == 0, output
    passed = re.search(r"(\d+) passed", result.stdout)
    assert passed and int(passed.group(1)) == len(CORE), output
    assert "skipped" not in result.stdout.splitlines()[-1], output
    # The test, its beats and its workers all came through PgBouncer.
    logins = re.findall(rf"login attempt: db=test_sched_{run_id}\b", log)
    assert len(logins) >= 10, log[-3000:]
