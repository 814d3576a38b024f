"""`schedctl backfill` prints what the other commands print: a table by default (`-o table`),
the API's answer as JSON or YAML for scripts (`-o json`, `-o yaml`)."""

from __future__ import annotations

import json

import pytest
import yaml

from dags.models import Backfill
from tests.cli.conftest import run_schedctl

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

HOURLY = {
    "name": "hourly-report",
    "schedule": {"type": "cron", "expression": "0 * * * *", "timezone": "UTC"},
    "handler": {"type": "python", "callable": "echo"},
    "enabled": False,
}


def _ok(result) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_backfill_prints_a_table_by_default_and_json_or_yaml_when_asked(stack, cli_env, tmp_path):
    _ok(run_schedctl("login", "--url", stack.url, "--username", stack.username, env=cli_env))
    definition = tmp_path / "hourly.json"
    definition.write_text(json.dumps(HOURLY))
    _ok(run_schedctl("apply", "-f", str(definition), env=cli_env))

    window = ("--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T03:00:00Z")
    printed = _ok(run_schedctl("backfill", "hourly-report", *window, env=cli_env))
    header, row = printed.strip().splitlines()
    assert header.split()[:5] == ["ID", "TARGET", "START", "END", "STATUS"]
    first = Backfill.platform.get()
    assert row.split()[:2] == [str(first.id), "task"]
    assert "hourly-report" in row and "2026-01-01 00:00:00" in row and "2026-01-01 03:00:00" in row
    assert "{" not in printed  # not the JSON it used to print
    assert first.total == 3

    later = ("--from", "2026-01-02T00:00:00Z", "--to", "2026-01-02T02:00:00Z")
    answer = json.loads(
        _ok(run_schedctl("backfill", "hourly-report", *later, "-o", "json", env=cli_env))
    )
    assert answer["target"]["name"] == "hourly-report" and answer["total"] == 2
    assert answer["start"] == "2026-01-02T00:00:00Z"

    third = ("--from", "2026-01-03T00:00:00Z", "--to", "2026-01-03T01:00:00Z")
    as_yaml = yaml.safe_load(
        _ok(run_schedctl("backfill", "hourly-report", *third, "-o", "yaml", env=cli_env))
    )
    assert as_yaml["total"] == 1 and as_yaml["status"] in ("running", "completed")
    assert Backfill.platform.count() == 3


def test_backfill_reprocess_failed_dry_runs_then_runs_the_failed_fire_again(
    stack, cli_env, tmp_path
):
    from datetime import UTC, datetime

    from scheduler_app.models import TaskDefinition, TaskExecution

    _ok(run_schedctl("login", "--url", stack.url, "--username", stack.username, env=cli_env))
    definition = tmp_path / "hourly.json"
    definition.write_text(json.dumps(HOURLY))
    _ok(run_schedctl("apply", "-f", str(definition), env=cli_env))
    task = TaskDefinition.platform.get(name="hourly-report")
    for hour, status in ((1, "success"), (2, "failed")):
        TaskExecution.objects.create(
            tenant=task.tenant,
            task=task,
            status=status,
            scheduled_at=datetime(2026, 1, 1, hour, tzinfo=UTC),
            attempt=1,
            max_attempts=1,
        )
    window = ("--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T03:00:00Z")

    printed = _ok(
        run_schedctl(
            "backfill", "hourly-report", *window, "--reprocess", "failed", "--dry-run", env=cli_env
        )
    )
    lines = printed.strip().splitlines()
    assert lines[0].split()[:3] == ["FIRE", "TIME", "OUTCOME"]
    assert "new run" in lines[1]
    assert "skipped (already succeeded)" in lines[2]
    assert "run again (was failed)" in lines[3]
    assert lines[-1].startswith("3 fire times (reprocess failed)")
    assert not Backfill.platform.exists()

    answer = json.loads(
        _ok(
            run_schedctl(
                "backfill", "hourly-report", *window, "--reprocess", "failed",
                "--max-parallel", "3", "-o", "json", env=cli_env,
            )
        )
    )  # fmt: skip
    assert answer["reprocess"] == "failed" and answer["reprocessed"] == 1
    again = TaskExecution.platform.get(
        task=task, scheduled_at=datetime(2026, 1, 1, 2, tzinfo=UTC), attempt=2
    )
    assert again.trigger == "backfill"

    refused = run_schedctl("backfill", "hourly-report", *window, "--reprocess", "some", env=cli_env)
    assert refused.returncode != 0 and "reprocess" in refused.stderr
    assert Backfill.platform.count() == 1
