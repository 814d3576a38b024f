"""The SDK's `cron(..., exclude=...)` renders the API's `schedule.exclude`."""

from __future__ import annotations

from django.utils import timezone

from scheduler_app.services.task_spec import task_spec_to_fields
from scheduler_sdk import Task, cron, python


def test_cron_with_exclusions_renders_the_apis_shape():
    rules = [{"calendar": "holidays:US", "reason": "bank holiday"}, {"date": "2026-12-24"}]
    schedule = cron("0 9 * * 1-5", tz="America/New_York", exclude=rules)
    assert schedule == {
        "type": "cron",
        "expression": "0 9 * * 1-5",
        "timezone": "America/New_York",
        "exclude": rules,
    }
    assert "exclude" not in cron("0 9 * * *")
    rendered = Task("weekdays", schedule=schedule, handler=python("noop")).render()
    fields = task_spec_to_fields(rendered, anchor=timezone.now())
    assert fields["schedule_exclude"] == rules
