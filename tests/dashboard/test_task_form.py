"""The dashboard's task form: the API's validation, tenant walls, the admin role, audit."""

from __future__ import annotations

import pytest
from django.test import Client

from dashboard.task_form import initial_for
from scheduler_app.choices import Role
from scheduler_app.models import AuditEntry, TaskDefinition, TenantMembership
from scheduler_app.services.tenant_network import tenant_webhook_hosts_set
from tests.factories import make_task

pytestmark = pytest.mark.django_db


SHELL = {"handler_type": "shell"}


@pytest.fixture
def task(tenant):
    return make_task(
        tenant,
        name="nightly-report",
        schedule={"type": "cron", "expression": "0 2 * * *", "timezone": "UTC"},
        tags=["reports"],
    )


def form_data(task: TaskDefinition | None = None, **changes) -> dict:
    """What the browser posts for an unchanged form, with `changes` typed in."""
    data = {k: v for k, v in initial_for(task).items() if v is not None}
    if data.pop("enabled", False):
        data["enabled"] = "on"  # an unticked checkbox is simply not posted
    if "handler_config" in changes:
        changes.setdefault("handler_mode", "json")  # the handler typed as JSON ("Edit as JSON")
    data.update(changes)
    return data


def edit(client: Client, task, **changes):
    return client.post(f"/dashboard/tasks/{task.id}/edit", form_data(task, **changes))


def snapshot(task) -> dict:
    row = TaskDefinition.platform.filter(id=task.id).values().get()
    row.pop("updated_at")
    return row


def test_the_form_shows_the_task_as_the_api_returns_it(signed_in, task):
    page = signed_in.get(f"/dashboard/tasks/{task.id}/edit")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'value="0 2 * * *"' in html and 'value="nightly-report"' in html
    assert "csrfmiddlewaretoken" in html
    assert 'id="live"' not in html  # the form is not swapped out by the live poll


def test_edit_saves_through_the_service_audits_and_feeds_the_schedulers(signed_in, task):
    before = TaskDefinition.platform.get(id=task.id)
    response = edit(
        signed_in,
        task,
        schedule_expression="*/10 * * * *",
        timezone="Europe/Paris",
        description="every ten minutes",
        priority="2",
        tags="reports, hourly",
        max_attempts="5",
        backoff="linear",
        jitter_seconds="30",
        overlap="skip",
        parameters='{"region": "eu"}',
    )
    assert response.status_code == 302
    assert response["Location"] == f"/dashboard/tasks/{task.id}"
    after = TaskDefinition.platform.get(id=task.id)
    assert after.schedule_expression == "*/10 * * * *" and after.timezone == "Europe/Paris"
    assert after.description == "every ten minutes" and after.priority == 2
    assert after.tags == ["reports", "hourly"] and after.parameters == {"region": "eu"}
    assert (after.max_attempts, after.backoff) == (5, "linear")
    assert (after.jitter_seconds, after.overlap) == (30, "skip")
    # The change feed: changed_at bumped and the next fire recomputed, as the API's PUT does.
    assert after.changed_at > before.changed_at
    assert after.next_fire_at != before.next_fire_at
    assert after.next_fire_at.minute % 10 == 0
    entry = AuditEntry.platform.get()
    assert entry.action == "task.update" and entry.object_type == "task"
    assert entry.object_id == str(task.id) and entry.actor == "user:acme-admin"
    assert entry.tenant_id == task.tenant_id and entry.detail["via"] == "dashboard"
    # What the edit changed, field by field (and nothing it left alone).
    assert (
        entry.detail["before"]["max_attempts"] != 5 and entry.detail["after"]["max_attempts"] == 5
    )
    assert "name" not in entry.detail["after"]
    # The task page then shows the five next fires of the new schedule.
    page = signed_in.get(response["Location"]).content.decode()
    assert "Saved nightly-report" in page and page.count("UTC ·") == 5


def test_an_unchanged_form_round_trips(signed_in, task):
    before = snapshot(task)
    assert edit(signed_in, task).status_code == 302
    after = snapshot(task)
    for moving in ("changed_at", "next_fire_at"):
        before.pop(moving), after.pop(moving)
    assert after == before


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"schedule_expression": "61 * * * *"}, "schedule_expression", "minute"),
        ({"timezone": "Mars/Olympus"}, "timezone", "Mars/Olympus"),
        ({"priority": "11"}, "priority", "10"),
        ({"priority": "soon"}, "priority", "valid integer"),
        ({"parameters": "{not json"}, "parameters", "not valid JSON"),
        (SHELL | {"handler_config": '{"command": "rm -rf /"}'}, "handler_config", "argv"),
        (SHELL | {"handler_config": '{"command": ["x"], "cwd": "/"}'}, "handler_config", "cwd"),
        ({"handler_config": '{"callable": "no-such"}'}, "handler_config", "not a registered"),
        (
            {"handler_type": "container", "handler_mode": "json"},
            "handler_config",
            "unknown field for a container",
        ),
        ({"jitter_seconds": "7200", "schedule_expression": "* * * * *"}, "jitter_seconds", ""),
        ({"start_at": "2030-01-02T00:00:00Z", "end_at": "2030-01-01T00:00:00Z"}, "end_at", ""),
        ({"notifications": '{"on_fire": ["x"]}'}, "notifications", "on_fire"),
        ({"name": ""}, "name", "blank"),
    ],
)
def test_bad_input_is_shown_on_its_field_and_changes_nothing(
    signed_in, task, changes, field, message
):
    before = snapshot(task)
    response = edit(signed_in, task, **changes)
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert field in errors, errors
    assert message in " ".join(errors[field])
    html = response.content.decode()
    assert "Nothing was saved" in html and f'id="field-{field}"' in html
    assert snapshot(task) == before
    assert not AuditEntry.platform.exists()


def test_invalid_cron_is_rejected_with_the_apis_message(signed_in, api, task):
    response = edit(signed_in, task, schedule_expression="*/0 * * *")
    api_answer = api.patch(
        f"/api/v1/tasks/{task.id}",
        {"schedule": {"type": "cron", "expression": "*/0 * * *"}},
        format="json",
    ).json()
    # The same words field by field (the API's top message prefixes the field's name).
    assert (
        response.context["form"].errors["schedule_expression"]
        == (api_answer["errors"]["schedule.expression"])
    )
    assert api_answer["message"].endswith(api_answer["errors"]["schedule.expression"][0])
    assert TaskDefinition.platform.get(id=task.id).schedule_expression == "0 2 * * *"


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://127.0.0.1:8000/admin/",
        "http://localhost/",
        "http://[::ffff:10.0.0.1]/",
    ],
)
def test_a_webhook_to_an_internal_address_is_refused_like_the_api_does(signed_in, api, task, url):
    before = snapshot(task)
    response = edit(signed_in, task, handler_type="http", handler_config=f'{{"url": "{url}"}}')
    assert response.status_code == 400
    [message] = response.context["form"].errors["handler_config"]
    assert "webhook_allowed_hosts" in message
    assert snapshot(task) == before
    answer = api.patch(
        f"/api/v1/tasks/{task.id}", {"handler": {"type": "http", "url": url}}, format="json"
    )
    assert answer.status_code == 400 and answer.json()["field"] == "handler.url"


def test_an_allow_listed_host_and_a_public_name_are_accepted(signed_in, tenant, task):
    tenant_webhook_hosts_set(tenant=tenant, hosts=["127.0.0.1"], actor="operator:test")
    config = '{"url": "http://127.0.0.1:9000/hook", "method": "post"}'
    assert edit(signed_in, task, handler_type="http", handler_config=config).status_code == 302
    saved = TaskDefinition.platform.get(id=task.id)
    assert saved.handler_type == "http" and saved.handler_config["method"] == "POST"
    config = '{"url": "https://hooks.example.com/x"}'
    assert edit(signed_in, task, handler_type="http", handler_config=config).status_code == 302


def test_a_duplicate_name_is_a_name_error(signed_in, tenant, task):
    make_task(tenant, name="taken")
    response = edit(signed_in, task, name="taken")
    assert "already exists" in response.context["form"].errors["name"][0]


@pytest.mark.parametrize("role", [Role.VIEWER, Role.OPERATOR])
def test_viewers_and_operators_get_403(tenant_and_user, task, role):
    _, user = tenant_and_user
    TenantMembership.platform.filter(user=user).update(role=role)
    client = Client()
    client.login(username=user.username, password="pw-123456")
    before = snapshot(task)
    assert client.get(f"/dashboard/tasks/{task.id}/edit").status_code == 403
    assert edit(client, task, description="nope").status_code == 403
    assert client.get("/dashboard/tasks/new").status_code == 403
    assert snapshot(task) == before
    page = client.get(f"/dashboard/tasks/{task.id}").content.decode()
    assert "btn-edit" not in page and "/admin/" not in page


def test_another_tenants_task_is_not_found(signed_in, tenant_factory):
    other, _ = tenant_factory("globex")
    foreign = make_task(other, name="theirs")
    before = snapshot(foreign)
    assert signed_in.get(f"/dashboard/tasks/{foreign.id}/edit").status_code == 404
    assert edit(signed_in, foreign, description="mine now").status_code == 404
    assert snapshot(foreign) == before
    assert not AuditEntry.platform.exists()


def test_anonymous_is_sent_to_login_and_csrf_is_enforced(tenant_and_user, task):
    response = Client().get(f"/dashboard/tasks/{task.id}/edit")
    assert response.status_code == 302 and "/dashboard/login/" in response["Location"]
    client = Client(enforce_csrf_checks=True)
    client.login(username=tenant_and_user[1].username, password="pw-123456")
    assert edit(client, task, description="forged").status_code == 403
    assert TaskDefinition.platform.get(id=task.id).description == ""


def test_edit_button_goes_to_the_form_and_admin_link_is_for_staff_only(signed_in, task):
    page = signed_in.get(f"/dashboard/tasks/{task.id}").content.decode()
    assert f'href="/dashboard/tasks/{task.id}/edit"' in page
    assert "/admin/" not in page


def test_staff_also_get_the_admin_link(tenant_and_user, task):
    _, user = tenant_and_user
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    client = Client()
    client.login(username=user.username, password="pw-123456")
    page = client.get(f"/dashboard/tasks/{task.id}").content.decode()
    assert f"/admin/scheduler_app/taskdefinition/{task.id}/change/" in page


def test_new_task_is_created_and_audited(signed_in, tenant):
    response = signed_in.post(
        "/dashboard/tasks/new",
        form_data(
            None,
            name="hello",
            schedule_type="interval",
            schedule_expression="15m",
        ),
    )
    assert response.status_code == 302
    task = TaskDefinition.platform.get(tenant=tenant, name="hello")
    assert response["Location"] == f"/dashboard/tasks/{task.id}"
    assert task.handler_config["command"] == ["echo", "hello"]
    assert task.next_fire_at is not None
    entry = AuditEntry.platform.get()
    assert (entry.action, entry.object_id, entry.detail["via"]) == (
        "task.create",
        str(task.id),
        "dashboard",
    )
    assert entry.detail["after"]["name"] == "hello"


def test_new_task_with_a_bad_schedule_creates_nothing(signed_in, tenant):
    response = signed_in.post(
        "/dashboard/tasks/new",
        form_data(None, name="hello", schedule_type="once", run_at="not a date"),
    )
    assert response.status_code == 400
    assert "run_at" in response.context["form"].errors
    assert not TaskDefinition.platform.filter(tenant=tenant).exists()


def test_every_mistake_is_reported_in_one_submit_with_existing_describedby_ids(signed_in, task):
    """Four mistakes, one submit: the name, the cron expression, the handler and a JSON
    field (each was a round trip of its own: the services stop at their first refusal)."""
    import re

    before = snapshot(task)
    response = edit(
        signed_in,
        task,
        name="",
        schedule_expression="61 * * * *",
        handler_config='{"command": "not a list"}',
        parameters="{not json",
    )
    assert response.status_code == 400
    html = response.content.decode()
    summary = html.split('id="form-errors"')[1].split("</div>")[0]
    for field in ("name", "schedule_expression", "handler_config", "parameters"):
        assert f'href="#id_{field}"' in summary, field
        assert re.search(f'class="field has-error[^"]*" id="field-{field}"', html), field
    assert "4 fields to correct" in summary
    assert snapshot(task) == before
    # Every aria-describedby names elements that are on the page.
    ids = set(re.findall(r'\sid="([^"]+)"', html))
    described = re.findall(r'aria-describedby="([^"]+)"', html)
    assert described
    for value in described:
        for target in value.split():
            assert target in ids, target


def test_two_mistakes_in_one_schedule_block_are_both_on_the_form(signed_in, api, task):
    """A bad cron expression and an unknown zone: both fields say so in the one submit
    (the schedule block used to stop at its first mistake), in the API's own words."""
    before = snapshot(task)
    response = edit(signed_in, task, schedule_expression="61 * * * *", timezone="Mars/Olympus")
    assert response.status_code == 400
    errors = response.context["form"].errors
    api_errors = api.patch(
        f"/api/v1/tasks/{task.id}",
        {"schedule": {"type": "cron", "expression": "61 * * * *", "timezone": "Mars/Olympus"}},
        format="json",
    ).json()["errors"]
    assert errors["schedule_expression"] == api_errors["schedule.expression"]
    assert errors["timezone"] == api_errors["schedule.timezone"]
    summary = response.content.decode().split('id="form-errors"')[1].split("</div>")[0]
    assert 'href="#id_schedule_expression"' in summary and 'href="#id_timezone"' in summary
    assert snapshot(task) == before


def test_a_once_schedule_with_a_bad_instant_and_zone_shows_both(signed_in, tenant):
    response = signed_in.post(
        "/dashboard/tasks/new",
        form_data(None, name="hello", schedule_type="once", run_at="not a date", timezone="X/Y"),
    )
    assert response.status_code == 400
    assert {"run_at", "timezone"} <= set(response.context["form"].errors)
    assert not TaskDefinition.platform.filter(tenant=tenant).exists()
