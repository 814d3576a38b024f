"""`schedctl stats` as a real process against the live API: runs done by a real worker,
the stats buckets refreshed the way the bulk worker does it, the table and `-o json` read
back (a task and a DAG), and a bad window refused naming it."""

from __future__ import annotations

import json

import pytest
import yaml

from data_lifecycle.services.stats_refresh import task_stats_refresh
from tests.cli.conftest import run_schedctl

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ECHO = {
    "name": "echoes",
    "schedule": {"type": "manual"},
    "handler": {"type": "python", "callable": "echo"},
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


def test_stats_of_a_task_and_a_dag_count_the_runs_done(stack, cli_env, tmp_path):
    _ok(run_schedctl("login", "--url", stack.url, "--username", stack.username, env=cli_env))
    definitions = tmp_path / "defs"
    definitions.mkdir()
    (definitions / "echoes.json").write_text(json.dumps(ECHO))
    (definitions / "fails.json").write_text(json.dumps(FAILS))
    (definitions / "pair.yaml").write_text(yaml.safe_dump(PAIR))
    _ok(run_schedctl("apply", "-f", str(definitions), env=cli_env))
    for _ in range(3):
        assert run_schedctl("trigger", "echoes", "--wait", env=cli_env, timeout=120).returncode == 0
    assert run_schedctl("trigger", "fails", "--wait", env=cli_env, timeout=120).returncode == 1
    assert run_schedctl("trigger", "pair", "--wait", env=cli_env, timeout=180).returncode == 0
    task_stats_refresh()

    answer = json.loads(_ok(run_schedctl("stats", "echoes", "-o", "json", env=cli_env)))
    assert answer["window"] == "7d" and answer["bucket"] == "day"
    assert answer["totals"]["count"] == 3
    assert answer["totals"]["by_status"] == {"success": 3}
    assert answer["totals"]["success_rate"] == 1.0
    assert answer["totals"]["duration"]["p50"] is not None
    failing = json.loads(_ok(run_schedctl("stats", "fails", "-o", "json", env=cli_env)))
    assert failing["totals"]["by_status"] == {"failed": 1}
    assert failing["totals"]["success_rate"] == 0.0

    printed = _ok(run_schedctl("stats", "echoes", "--window", "24h", env=cli_env))
    lines = printed.splitlines()
    assert lines[0] == "task echoes: runs scheduled in the last 24h, by hour"
    assert lines[1].split()[:3] == ["START", "RUNS", "SUCCESS"]
    assert "DURATION P95" in lines[1] and "LAG P95" in lines[1]
    total = lines[-1].split()
    assert total[:5] == ["total", "(24h)", "3", "100.0%", "0"]

    dag = json.loads(_ok(run_schedctl("stats", "pair", "--kind", "dag", "-o", "json", env=cli_env)))
    assert dag["totals"]["count"] == 1 and dag["totals"]["by_status"] == {"success": 1}

    refused = run_schedctl("stats", "echoes", "--window", "2w", env=cli_env)
    assert refused.returncode == 1
    assert "window" in refused.stderr
