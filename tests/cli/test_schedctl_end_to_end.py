"""schedctl as a user runs it, a real process against the real stack: log in, apply a
directory with a task and a DAG, see them, trigger, follow the run's output to its end,
apply again (nothing changes), edit a file, see the diff with --dry-run, apply it."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml

from dags.models import Dag
from scheduler_app.models import TaskDefinition
from tests.cli.conftest import run_schedctl

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.needs_os_tool("bubblewrap"),
]

TASK = {
    "name": "cli-hello",
    "description": "says hello twice",
    "schedule": {"type": "interval", "expression": "1h"},
    "handler": {
        "type": "shell",
        "command": ["sh", "-c", "echo hello-one; sleep 1; echo hello-two"],
    },
    "retry_policy": {"max_attempts": 1},
    "tags": ["cli"],
}
DAG = """\
dag: cli-etl
description: extract then load
schedule: {type: cron, expression: "0 2 * * *", timezone: Europe/Berlin}
tasks:
  - id: extract
    handler: {type: python, callable: echo}
    parameters: {rows: 3}
  - id: load
    handler: {type: python, callable: noop}
    depends_on: [extract]
"""


def _write(directory: Path) -> tuple[Path, Path]:
    directory.mkdir()
    task_file = directory / "hello.yaml"
    task_file.write_text(yaml.safe_dump(TASK, sort_keys=False))
    dag_file = directory / "etl.yaml"
    dag_file.write_text(DAG)
    return task_file, dag_file


def _ok(result) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_login_apply_get_trigger_follow_and_reapply(stack, cli_env, tmp_path):
    out = _ok(run_schedctl("login", "--url", stack.url, "--username", stack.username, env=cli_env))
    assert f"Logged in to {stack.url} as acme-admin" in out
    credentials = Path(cli_env["SCHEDCTL_CONFIG_DIR"]) / "credentials.json"
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
    assert "pw-123456" not in credentials.read_text()

    definitions = tmp_path / "definitions"
    task_file, dag_file = _write(definitions)
    out = _ok(run_schedctl("apply", "-f", str(definitions), env=cli_env))
    assert "task cli-hello: created" in out
    assert "dag cli-etl: created" in out
    task = TaskDefinition.platform.get(name="cli-hello", deleted_at__isnull=True)
    assert task.handler_config["command"] == TASK["handler"]["command"]
    assert Dag.platform.get(name="cli-etl").timezone == "Europe/Berlin"

    tasks_table = _ok(run_schedctl("get", "tasks", env=cli_env))
    assert tasks_table.splitlines()[0].split()[:2] == ["NAME", "SCHEDULE"]
    assert any(line.startswith("cli-hello ") for line in tasks_table.splitlines())
    dags = json.loads(_ok(run_schedctl("get", "dags", "-o", "json", env=cli_env)))
    assert [dag["name"] for dag in dags] == ["cli-etl"]
    assert (
        yaml.safe_load(_ok(run_schedctl("get", "tasks", "-o", "yaml", env=cli_env)))[0]["name"]
        == "cli-hello"
    )

    triggered = json.loads(_ok(run_schedctl("trigger", "cli-hello", "-o", "json", env=cli_env)))
    run_id = triggered["execution_id"]
    followed = run_schedctl("logs", run_id, "-f", env=cli_env, timeout=180)
    out = _ok(followed)
    # The log's lines as the API keeps them: "<time> [stdout] <text>".
    printed = [line.split(" [stdout] ", 1)[1] for line in out.splitlines() if "[stdout]" in line]
    assert printed == ["hello-one", "hello-two"]
    assert f"run {run_id} ended: success" in followed.stderr
    # The real worker received it under the task's name (the message's shadow name), which
    # is also the name its task events carry to Flower.
    assert "Task cli-hello[" in stack.worker.log()
    runs = json.loads(
        _ok(run_schedctl("get", "runs", "--task", "cli-hello", "-o", "json", env=cli_env))
    )
    assert [(run["id"], run["status"]) for run in runs] == [(run_id, "success")]

    # Applying the same files again changes nothing, on the server as in the output.
    version, changed_at = Dag.platform.get(name="cli-etl").version, task.changed_at
    out = _ok(run_schedctl("apply", "-f", str(definitions), env=cli_env))
    assert "task cli-hello: unchanged" in out and "dag cli-etl: unchanged" in out
    assert "Plan: 2 unchanged" in out
    assert Dag.platform.get(name="cli-etl").version == version
    assert TaskDefinition.platform.get(id=task.id).changed_at == changed_at

    # An edit: --dry-run shows it and changes nothing; apply changes it.
    task_file.write_text(task_file.read_text().replace("expression: 1h", "expression: 2h"))
    dag_file.write_text(DAG.replace("rows: 3", "rows: 4"))
    out = _ok(run_schedctl("apply", "-f", str(definitions), "--dry-run", env=cli_env))
    assert "task cli-hello: will be updated" in out
    assert '~ schedule.expression: "1h" -> "2h"' in out
    assert "dag cli-etl: will be updated" in out
    assert "~ tasks.extract.parameters.rows: 3 -> 4" in out
    assert TaskDefinition.platform.get(id=task.id).schedule_expression == "1h"
    assert Dag.platform.get(name="cli-etl").version == version

    applied = json.loads(
        _ok(run_schedctl("apply", "-f", str(definitions), "-o", "json", env=cli_env))
    )
    assert applied["applied"] is True
    assert {(c["kind"], c["action"]) for c in applied["changes"]} == {
        ("task", "update"),
        ("dag", "update"),
    }
    assert TaskDefinition.platform.get(id=task.id).schedule_expression == "2h"
    assert Dag.platform.get(name="cli-etl").version == version + 1
    out = _ok(run_schedctl("apply", "-f", str(definitions), env=cli_env))
    assert "Plan: 2 unchanged" in out
