"""The task form's "Flow control" section: concurrency and rate limits, a pool of the tenant's,
singleton and debounce, saved through the API's own checks, shown again on edit, refused next
to the field with nothing saved; and the run page saying what a run waits on."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from dashboard.task_form import initial_for
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.services.pools import pool_create
from tests.factories import make_task

pytestmark = pytest.mark.django_db

LIMITS = '[{"key": "{{ parameters.customer_id }}", "max_running": 2, "strategy": "queue"}]'
RATES = '[{"key": "stripe", "limit": 10, "per": "minute"}]'


def form_data(task: TaskDefinition | None = None, **changes) -> dict:
    """What the browser posts for an unchanged form, with `changes` typed in."""
    data = {k: v for k, v in initial_for(task).items() if v is not None}
    for box in ("enabled", "singleton"):
        if data.pop(box, False):
            data[box] = "on"  # an unticked checkbox is simply not posted
    data.update(changes)
    return data


def _errors_of(html: str, field: str) -> str:
    """The error text shown under the form field `field` ("" when none)."""
    found = re.search(rf'id="id_{field}_errors">(.*?)</div>', html, re.S)
    return re.sub(r"<[^>]+>", "", found.group(1)).strip() if found else ""


def _snapshot(task) -> dict:
    row = TaskDefinition.platform.filter(id=task.id).values().get()
    for moving in ("updated_at", "changed_at", "next_fire_at"):  # a save moves them
        row.pop(moving)
    return row


@pytest.fixture
def task(tenant):
    return make_task(
        tenant,
        name="sync",
        schedule={"type": "cron", "expression": "0 2 * * *", "timezone": "UTC"},
    )


def test_a_new_task_takes_its_flow_control_from_the_form(signed_in, tenant):
    pool_create(tenant=tenant, name="warehouse", slots=5)
    response = signed_in.post(
        "/dashboard/tasks/new",
        form_data(
            None,
            name="sync",
            schedule_type="interval",
            schedule_expression="15m",
            concurrency=LIMITS,
            rate_limit=RATES,
            pool="warehouse",
            pool_slots="2",
            singleton="on",
            singleton_key="{{ parameters.customer_id }}",
        ),
    )
    assert response.status_code == 302, _all_errors(response)
    saved = TaskDefinition.platform.get(tenant=tenant, name="sync")
    assert saved.flow_control == {
        "concurrency": [
            {"key": "{{ parameters.customer_id }}", "max_running": 2, "strategy": "queue"}
        ],
        "pool": "warehouse",
        "pool_slots": 2,
        "rate_limit": [{"key": "stripe", "limit": 10, "per": "minute"}],
    }
    assert saved.singleton == {"key": "{{ parameters.customer_id }}"}
    assert saved.debounce is None


def _all_errors(response) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))[:2000]


def test_the_edit_form_shows_the_flow_control_and_saves_it_unchanged(signed_in, tenant, task):
    pool_create(tenant=tenant, name="warehouse", slots=5)
    response = signed_in.post(
        f"/dashboard/tasks/{task.id}/edit",
        form_data(task, pool="warehouse", debounce_seconds="30", debounce_key="{{ dag }}"),
    )
    assert response.status_code == 302, _all_errors(response)
    task.refresh_from_db()
    assert task.flow_control == {"pool": "warehouse", "pool_slots": 1}
    assert task.debounce == {"key": "{{ dag }}", "seconds": 30, "max_wait_seconds": 300}

    page = signed_in.get(f"/dashboard/tasks/{task.id}/edit").content.decode()
    assert '<option value="warehouse" selected>warehouse (0 of 5 slots in use)</option>' in page
    assert 'name="debounce_seconds" value="30"' in page
    before = _snapshot(task)
    assert signed_in.post(f"/dashboard/tasks/{task.id}/edit", form_data(task)).status_code == 302
    assert _snapshot(task) == before  # round trip: the form's values are the task's

    # Blank fields turn it all off, as a PUT without them would.
    cleared = form_data(task, pool="", pool_slots="", debounce_key="", debounce_seconds="")
    cleared["debounce_max_wait_seconds"] = ""
    assert signed_in.post(f"/dashboard/tasks/{task.id}/edit", cleared).status_code == 302
    task.refresh_from_db()
    assert task.flow_control == {} and task.debounce is None


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"concurrency": '[{"key": "k", "max_running": 0}]'}, "concurrency", "max_running"),
        (
            {"concurrency": '[{"key": "k", "max_running": 1, "strategy": "x"}]'},
            "concurrency",
            "strategy",
        ),
        ({"concurrency": "[{"}, "concurrency", "not valid JSON"),
        (
            {"rate_limit": '[{"key": "{{ env.HOME }}", "limit": 5}]'},
            "rate_limit",
            "unknown variable",
        ),
        ({"rate_limit": '[{"key": "k", "limit": 5, "per": "week"}]'}, "rate_limit", "per"),
        ({"pool": "nowhere"}, "pool", "nowhere"),
        ({"pool_slots": "2"}, "pool_slots", "needs a pool"),
        ({"singleton": "on", "singleton_key": "{{ secret:db }}"}, "singleton_key", "secret"),
        ({"debounce_seconds": "abc"}, "debounce_seconds", "whole number"),
        ({"debounce_seconds": "0"}, "debounce_seconds", "whole number"),
        ({"debounce_key": "k"}, "debounce_seconds", "required"),
        (
            {"debounce_seconds": "30", "debounce_max_wait_seconds": "5"},
            "debounce_max_wait_seconds",
            "whole number",
        ),
        ({"singleton": "on", "debounce_seconds": "30"}, "debounce_seconds", "not both"),
    ],
)
def test_bad_flow_control_is_shown_next_to_its_field_and_nothing_is_saved(
    signed_in, task, changes, field, words
):
    before = _snapshot(task)
    response = signed_in.post(f"/dashboard/tasks/{task.id}/edit", form_data(task, **changes))
    assert response.status_code == 400
    shown = _errors_of(response.content.decode(), field)
    assert words in shown, _all_errors(response)
    assert _snapshot(task) == before


def test_the_pool_select_lists_only_the_tenants_own_pools(signed_in, tenant, tenant_factory):
    pool_create(tenant=tenant, name="warehouse", slots=3)
    other, _ = tenant_factory("globex")
    pool_create(tenant=other, name="secret-pool", slots=9)
    holder = make_task(tenant, name="loader", schedule={"type": "manual"})
    TaskExecution.objects.create(
        tenant_id=tenant.id,
        task=holder,
        status="running",
        scheduled_at=timezone.now(),
        attempt=1,
        max_attempts=1,
        flow_holds={f"p:{tenant.id}:warehouse": 2},
    )
    page = signed_in.get("/dashboard/tasks/new").content.decode()
    assert '<option value="warehouse">warehouse (2 of 3 slots in use)</option>' in page
    assert "secret-pool" not in page
    assert 'id="flow-fields"' in page


def test_the_run_page_says_which_limit_a_waiting_run_waits_on(signed_in, tenant):
    task = make_task(tenant, name="sync", schedule={"type": "manual"})
    now = timezone.now()
    run = TaskExecution.objects.create(
        tenant_id=tenant.id,
        task=task,
        status="pending",
        scheduled_at=now,
        attempt=1,
        max_attempts=1,
        waiting_for={"kind": "concurrency", "key": "customer-42", "running": 2, "max": 2},
    )
    html = signed_in.get(f"/dashboard/executions/{run.id}").content.decode()
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))
    assert "Waiting on its concurrency key customer-42: 2 of 2 running" in text
    TaskExecution.platform.filter(id=run.id).update(
        waiting_for={"kind": "pool", "key": "warehouse", "running": 5, "max": 5}
    )
    html = signed_in.get(f"/dashboard/executions/{run.id}").content.decode()
    assert "5 of 5 slots in use" in html and "<code>warehouse</code>" in html
