"""The task form's Exclude field: saved through the API's rules, shown again, and a bad
rule is shown on the field and changes nothing."""

from __future__ import annotations

import json

import pytest

from scheduler_app.models import TaskDefinition
from tests.dashboard.test_task_form import edit, snapshot
from tests.factories import make_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def task(tenant):
    return make_task(
        tenant,
        name="nightly-report",
        schedule={"type": "cron", "expression": "0 2 * * *", "timezone": "America/New_York"},
    )


def test_exclusions_are_saved_and_shown_again(signed_in, task):
    rules = [{"calendar": "holidays:us", "reason": "bank holiday"}, {"date": "2026-12-24"}]
    response = edit(signed_in, task, schedule_exclude=json.dumps(rules))
    assert response.status_code == 302, response.context["form"].errors
    saved = TaskDefinition.platform.get(id=task.id)
    assert saved.schedule_exclude == [
        {"calendar": "holidays:US", "reason": "bank holiday"},
        {"date": "2026-12-24"},
    ]
    page = signed_in.get(f"/dashboard/tasks/{task.id}/edit").content.decode()
    assert "holidays:US" in page and "bank holiday" in page
    # An unchanged form keeps them; an emptied field removes them.
    assert edit(signed_in, saved).status_code == 302
    assert TaskDefinition.platform.get(id=task.id).schedule_exclude == saved.schedule_exclude
    assert edit(signed_in, task, schedule_exclude="").status_code == 302
    assert TaskDefinition.platform.get(id=task.id).schedule_exclude == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[{"calendar": "holidays:Atlantis"}]', "schedule.exclude[0].calendar"),
        ('[{"from": "2026-12-31", "to": "2026-12-01"}]', "schedule.exclude[0].to"),
        ('[{"date": "soon"}]', "schedule.exclude[0].date"),
        ("[not json", "not valid JSON"),
    ],
)
def test_a_bad_rule_is_shown_on_the_field_and_changes_nothing(signed_in, task, text, message):
    before = snapshot(task)
    response = edit(signed_in, task, schedule_exclude=text)
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert "schedule_exclude" in errors, errors
    assert message in " ".join(errors["schedule_exclude"])
    assert snapshot(task) == before


def test_the_task_page_shows_the_skipped_fires_among_the_next_ones(signed_in, tenant):
    even_days = make_task(
        tenant,
        name="even-days",
        schedule={
            "type": "cron",
            "expression": "0 9 * * *",
            "timezone": "UTC",
            "exclude": [{"cron": "* * */2 * *", "reason": "odd days"}],
        },
    )
    page = signed_in.get(f"/dashboard/tasks/{even_days.id}").content.decode()
    assert page.count("UTC ·") == 5  # five fires still listed
    # Odd days of the month are skipped: the five even days hold four of them at least.
    assert page.count("skipped: odd days") >= 4
