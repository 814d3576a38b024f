"""`schedctl pause --note` and `schedctl describe`, as real processes against the live API:
the note is sent and kept with the pause, describe says who paused, when and why, the owner,
the failures in a row, the runbook policy and the runs left. A user of another tenant
finds nothing of it to pause. No worker: nothing here runs."""

from __future__ import annotations

import json

import pytest
import yaml

from dags.models import Dag
from scheduler_app.models import TaskDefinition
from tests.cli.conftest import PASSWORD, run_schedctl

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

NIGHTLY = {
    "name": "nightly",
    "schedule": {"type": "cron", "expression": "0 2 * * *"},
    "handler": {"type": "python", "callable": "noop"},
    "owner": "user:acme-admin",
    "policy": {"remaining_runs": 5, "pause_after_failures": 3},
}
PAIR = {
    "dag": "pair",
    "schedule": {"type": "cron", "expression": "0 3 * * *"},
    "tasks": [{"id": "only", "handler": {"type": "python", "callable": "noop"}}],
}


def _ok(result) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture
def signed_in(live_server, transactional_db, cli_env, tmp_path):
    from scheduler_app.services.tenants import tenant_create_with_admin

    tenant_create_with_admin(slug="acme", username="acme-admin", password=PASSWORD)
    _ok(run_schedctl("login", "--url", live_server.url, "--username", "acme-admin", env=cli_env))
    (tmp_path / "nightly.json").write_text(json.dumps(NIGHTLY))
    (tmp_path / "pair.yaml").write_text(yaml.safe_dump(PAIR))
    _ok(run_schedctl("apply", "-f", str(tmp_path / "nightly.json"), env=cli_env))
    _ok(run_schedctl("apply", "-f", str(tmp_path / "pair.yaml"), env=cli_env))
    return live_server


def test_pause_with_a_note_and_describe_shows_the_record_and_the_runbook(signed_in, cli_env):
    paused = _ok(run_schedctl("pause", "nightly", "--note", "warehouse migration", env=cli_env))
    task = TaskDefinition.platform.get(name="nightly")
    assert (task.paused, task.paused_by, task.pause_note) == (
        True,
        "user:acme-admin",
        "warehouse migration",
    )
    stamp = task.paused_at.strftime("%Y-%m-%d %H:%M:%S")
    assert (
        paused.strip() == f"task nightly paused by acme-admin at {stamp} UTC: warehouse migration"
    )
    TaskDefinition.platform.filter(id=task.id).update(consecutive_failures=2)

    text = _ok(run_schedctl("describe", "task", "nightly", env=cli_env)).splitlines()
    assert text[:4] == [
        f"task nightly: paused by acme-admin at {stamp} UTC: warehouse migration",
        "  owner: user:acme-admin",
        "  consecutive failures: 2 (the runbook acts at 3)",
        "  remaining runs: 5 (then the schedule pauses itself)",
    ]
    described = json.loads(
        _ok(run_schedctl("describe", "task", "nightly", "-o", "json", env=cli_env))
    )
    assert described["pause_note"] == "warehouse migration"
    assert described["paused_by"] == "user:acme-admin" and described["consecutive_failures"] == 2
    assert described["policy"]["remaining_runs"] == 5

    assert "resumed" in _ok(run_schedctl("resume", "nightly", env=cli_env))
    text = _ok(run_schedctl("describe", "task", "nightly", env=cli_env))
    assert text.startswith("task nightly: active\n")


def test_a_dag_pauses_with_a_note_too(signed_in, cli_env):
    _ok(run_schedctl("pause", "pair", "--note", "upstream is down", env=cli_env))
    dag = Dag.platform.get(name="pair")
    assert dag.paused and dag.pause_note == "upstream is down"
    text = _ok(run_schedctl("describe", "dag", "pair", env=cli_env))
    assert text.splitlines()[0].endswith("UTC: upstream is down")
    assert "  remaining runs: unlimited" in text.splitlines()


def test_another_tenants_user_cannot_pause_it(signed_in, cli_env):
    from scheduler_app.services.tenants import tenant_create_with_admin

    tenant_create_with_admin(slug="globex", username="intruder", password=PASSWORD)
    _ok(run_schedctl("login", "--url", signed_in.url, "--username", "intruder", env=cli_env))
    refused = run_schedctl("pause", "nightly", "--note", "mine now", env=cli_env)
    assert refused.returncode == 1 and "no task or DAG named 'nightly'" in refused.stderr
    refused = run_schedctl("describe", "task", "nightly", env=cli_env)
    assert refused.returncode == 1 and "warehouse" not in refused.stdout
    task = TaskDefinition.platform.get(name="nightly")
    assert not task.paused and task.pause_note == ""
