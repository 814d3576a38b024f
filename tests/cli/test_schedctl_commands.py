"""schedctl's commands on what exists, as real processes against the live API and a real
worker: a DAG triggered and waited for, its runs and description, pause/resume, a running
run cancelled (and `logs -f` exiting 1 for it), the dead-letter queue."""

from __future__ import annotations

import json

import pytest
import yaml

from scheduler_app.models import TaskDefinition, TaskExecution
from tests.cli.conftest import run_schedctl
from tests.processes import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SLOW = {
    "name": "slow",
    "schedule": {"type": "interval", "expression": "1h"},
    "handler": {"type": "shell", "command": ["sh", "-c", "echo started; sleep 60"]},
    "retry_policy": {"max_attempts": 1},
}
FAILS = {
    "name": "fails",
    "schedule": {"type": "manual"},
    "handler": {"type": "python", "callable": "fail"},
    "retry_policy": {"max_attempts": 1},
}
PAIR = {
    "dag": "pair",
    "tasks": [
        {"id": "first", "handler": {"type": "python", "callable": "echo"}},
        {"id": "second", "handler": {"type": "python", "callable": "echo"}, "depends_on": "first"},
    ],
}


def _ok(result) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.needs_os_tool("bubblewrap")
def test_trigger_wait_runs_describe_pause_resume_cancel_and_dlq(stack, cli_env, tmp_path):
    _ok(run_schedctl("login", "--url", stack.url, "--username", stack.username, env=cli_env))
    definitions = tmp_path / "defs"
    definitions.mkdir()
    (definitions / "slow.json").write_text(json.dumps(SLOW))
    (definitions / "pair.yaml").write_text(yaml.safe_dump(PAIR))
    _ok(run_schedctl("apply", "-f", str(definitions), env=cli_env))

    waited = run_schedctl("trigger", "pair", "--wait", "-p", "n=3", env=cli_env, timeout=180)
    assert waited.returncode == 0, waited.stderr
    assert "ended: success" in waited.stderr
    runs = run_schedctl("get", "runs", "--dag", "pair", "-o", "json", env=cli_env)
    (run,) = json.loads(_ok(runs))
    assert run["status"] == "success" and run["parameters"] == {"n": 3}
    described = json.loads(_ok(run_schedctl("describe", "dag", "pair", "-o", "json", env=cli_env)))
    assert described["definition"]["dag"] == "pair"
    assert [r["id"] for r in described["recent_runs"]] == [run["id"]]
    task = json.loads(_ok(run_schedctl("describe", "task", "slow", "-o", "json", env=cli_env)))
    assert len(task["upcoming"]) == 5 and task["recent_runs"] == []

    assert "task slow paused" in _ok(run_schedctl("pause", "slow", env=cli_env))
    assert TaskDefinition.platform.get(name="slow").paused is True
    assert "task slow resumed, next fire" in _ok(run_schedctl("resume", "slow", env=cli_env))
    assert TaskDefinition.platform.get(name="slow").paused is False

    run_id = json.loads(_ok(run_schedctl("trigger", "slow", "-o", "json", env=cli_env)))[
        "execution_id"
    ]
    wait_until(
        lambda: TaskExecution.platform.filter(id=run_id, status="running").exists(),
        timeout=60,
        message="the slow run to start",
    )
    assert f"run {run_id}:" in _ok(run_schedctl("cancel", run_id, env=cli_env))
    followed = run_schedctl("logs", run_id, "-f", env=cli_env, timeout=120)
    assert followed.returncode == 1  # the run did not succeed: a script waiting on it can tell
    assert f"run {run_id} ended: cancelled" in followed.stderr
    assert "started" in followed.stdout

    assert "retried 0 dead letters" in _ok(run_schedctl("dlq", "retry", "--all", env=cli_env))
    assert json.loads(_ok(run_schedctl("get", "dlq", "-o", "json", env=cli_env))) == []


def test_a_failed_run_waited_for_then_retried_from_the_dead_letter_queue(stack, cli_env, tmp_path):
    _ok(run_schedctl("login", "--url", stack.url, "--username", stack.username, env=cli_env))
    (tmp_path / "fails.yaml").write_text(yaml.safe_dump(FAILS))
    _ok(run_schedctl("apply", "-f", str(tmp_path / "fails.yaml"), env=cli_env))
    waited = run_schedctl("trigger", "fails", "--wait", env=cli_env, timeout=180)
    assert waited.returncode == 1 and "ended: failed" in waited.stderr
    (dead,) = json.loads(_ok(run_schedctl("get", "dlq", "-o", "json", env=cli_env)))
    assert dead["task_name"] == "fails" and dead["dead_lettered"] is True
    table = _ok(run_schedctl("get", "dlq", env=cli_env))
    assert dead["id"] in table and "failing on purpose" in table
    retried = _ok(run_schedctl("dlq", "retry", dead["id"], env=cli_env))
    assert retried.startswith(f"retried {dead['id']}: new run ")
    assert TaskExecution.platform.filter(retry_of_id=dead["id"]).count() == 1
    none = _ok(run_schedctl("dlq", "retry", "--all", "--task", "no-such", env=cli_env))
    assert none.startswith("retried 0 dead letters")
    rerun = _ok(run_schedctl("rerun", dead["id"], "-p", "day=2026-12-01", env=cli_env))
    assert rerun.startswith(f"re-running {dead['id']}: new run ")
    again = TaskExecution.platform.get(retry_of_id=dead["id"], trigger="rerun")
    assert again.parameters == {"day": "2026-12-01"} and str(again.id) in rerun


def test_get_workers_is_for_platform_staff(stack, cli_env):
    from scheduler_app.services.tenants import tenant_create_with_admin

    _ok(run_schedctl("login", "--url", stack.url, "--username", stack.username, env=cli_env))
    refused = run_schedctl("get", "workers", env=cli_env)
    assert refused.returncode == 1 and "[permission_denied]" in refused.stderr
    tenant_create_with_admin(slug="ops", username="operator", password="pw-123456", staff=True)
    _ok(run_schedctl("login", "--url", stack.url, "--username", "operator", env=cli_env))
    fleet = json.loads(_ok(run_schedctl("get", "workers", "-o", "json", env=cli_env)))
    assert any(w["hostname"].startswith("w-cli-") for w in fleet["workers"])
    assert "w-cli-" in _ok(run_schedctl("get", "workers", env=cli_env))
