"""Import of django-celery-beat periodic tasks: one fixture row of each kind."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from scheduler_app.models import TaskDefinition

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "django_celery_beat.sql"
pytestmark = pytest.mark.django_db


@pytest.fixture
def beat_db(tmp_path) -> str:
    path = tmp_path / "old-project.sqlite3"
    with sqlite3.connect(path) as source:
        source.executescript(FIXTURE.read_text())
    return f"sqlite:///{path}"


@pytest.fixture(autouse=True)
def listed_tasks(settings):
    """The operator lists the old project's tasks (the celery handler sends nothing else)."""
    settings.CELERY_HANDLER_TASKS = [
        "reports.tasks.nightly@reports",
        "cache.tasks.refresh",
        "marketing.tasks.launch@default",
        "misc.tasks.six",
    ]


def _run(tenant, beat_db, *extra) -> str:
    out = StringIO()
    call_command(
        "import_celery_beat", "--tenant", tenant.slug, "--from-url", beat_db, *extra, stdout=out
    )
    return out.getvalue()


def test_dry_run_shows_the_plan_and_writes_nothing(tenant, beat_db):
    output = _run(tenant, beat_db, "--dry-run")
    assert "would create: nightly-report  cron 30 2 * * 1-5 America/New_York" in output
    assert "not converted: open-shutters: solar schedules" in output
    assert "4 to create (dry run), 3 not converted" in output
    assert not TaskDefinition.platform.filter(tenant=tenant).exists()


def test_a_task_not_in_celery_handler_tasks_is_reported_not_imported(tenant, beat_db, settings):
    settings.CELERY_HANDLER_TASKS = ["cache.tasks.refresh"]
    output = _run(tenant, beat_db, "--dry-run")
    assert "would create: refresh-cache" in output
    assert "not converted: nightly-report" in output and "CELERY_HANDLER_TASKS" in output


def test_every_kind_is_converted_or_reported(tenant, beat_db):
    output = _run(tenant, beat_db)
    tasks = {t.name: t for t in TaskDefinition.platform.filter(tenant=tenant)}
    assert set(tasks) == {"nightly-report", "refresh-cache", "launch-campaign", "six-hourly"}

    nightly = tasks["nightly-report"]
    assert (nightly.schedule_type, nightly.schedule_expression, nightly.timezone) == (
        "cron",
        "30 2 * * 1-5",
        "America/New_York",
    )
    assert nightly.handler_type == "celery"
    assert nightly.handler_config == {
        "type": "celery",
        "task": "reports.tasks.nightly",
        "args": ["sales"],
        "kwargs": {"region": "eu"},
        "queue": "reports",
    }
    # 02:30 New York on a weekday, in UTC.
    assert nightly.next_fire_at.astimezone(UTC).hour in (6, 7)

    cache = tasks["refresh-cache"]
    assert (cache.schedule_type, cache.schedule_expression) == ("interval", "15m")
    assert cache.enabled is False  # disabled in celery beat stays disabled
    assert cache.handler_config["queue"] == "celery"

    launch = tasks["launch-campaign"]
    assert launch.schedule_type == "once"
    assert launch.run_at == datetime(2031, 3, 4, 5, 6, 7, tzinfo=UTC)
    assert tasks["six-hourly"].handler_config["kwargs"] == {"a": [1, 2]}

    assert "not converted: open-shutters: solar schedules" in output
    assert "not converted: hot-loop: interval period 'microseconds' is not supported" in output
    assert "not converted: broken-cron:" in output

    again = _run(tenant, beat_db)  # a second run does not duplicate anything
    assert "0 created, 7 not converted" in again
    assert TaskDefinition.platform.filter(tenant=tenant).count() == 4
