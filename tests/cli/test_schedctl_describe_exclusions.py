"""`schedctl describe task` shows a task's calendar exclusions and its next skipped fires,
as a real process against the live API."""

from __future__ import annotations

import json

import pytest

from scheduler_app.services.tenants import tenant_create_with_admin
from tests.cli.conftest import PASSWORD, run_schedctl
from tests.factories import make_task

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

WEEKDAYS = {
    "type": "cron",
    "expression": "0 9 * * *",
    "timezone": "Europe/Berlin",
    "exclude": [{"cron": "* * * * 6,0", "reason": "weekend"}, {"calendar": "holidays:DE-BY"}],
}


def _ok(result) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_describe_shows_the_exclusions_and_the_next_skipped_fires(live_server, cli_env):
    tenant, _ = tenant_create_with_admin(slug="acme", username="acme-admin", password=PASSWORD)
    make_task(tenant, name="weekdays", schedule=WEEKDAYS)
    make_task(tenant, name="daily", schedule={"type": "cron", "expression": "0 9 * * *"})
    _ok(run_schedctl("login", "--url", live_server.url, "--username", "acme-admin", env=cli_env))

    described = json.loads(
        _ok(run_schedctl("describe", "task", "weekdays", "-o", "json", env=cli_env))
    )
    assert described["exclusions"] == [
        {"cron": "* * * * 6,0", "reason": "weekend"},
        {"calendar": "holidays:DE-BY"},
    ]
    assert len(described["upcoming"]) == 5
    skipped = described["next_skipped"]
    assert 2 <= len(skipped) <= 5  # ten days ahead hold a weekend at least
    assert "weekend" in {entry["reason"] for entry in skipped}
    assert not set(described["upcoming"]) & {entry["at"] for entry in skipped}

    text = _ok(run_schedctl("describe", "task", "weekdays", env=cli_env))
    assert "next_skipped:" in text and "reason: weekend" in text
    assert "holidays:DE-BY" in text

    plain = json.loads(_ok(run_schedctl("describe", "task", "daily", "-o", "json", env=cli_env)))
    assert "next_skipped" not in plain and "exclusions" not in plain
