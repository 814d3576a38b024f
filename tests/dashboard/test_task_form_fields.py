"""The task form's handler as fields of its type, the schedule's fields by kind, and the live
preview of the next fire times (GET /dashboard/schedule-preview): computed by the product's
schedule code, refusing a bad schedule with its message, scoped to the tenant."""

from __future__ import annotations

import pytest
from django.test import Client

from dashboard.task_form import initial_for
from scheduler_app.models import TaskDefinition
from tests.factories import make_task

pytestmark = pytest.mark.django_db

NEW = "/dashboard/tasks/new"


def new_task_post(**changes) -> dict:
    data = {k: v for k, v in initial_for(None).items() if v is not None}
    data.pop("enabled", None)
    data.update({"name": "made-in-the-form", "schedule_expression": "0 3 * * *"}, **changes)
    return data


def test_the_form_has_every_types_fields_each_with_its_own_template(signed_in):
    page = signed_in.get(NEW).content.decode()
    for handler_type in ("shell", "http", "python", "celery", "container"):
        assert f'data-handler-type="{handler_type}"' in page
    assert 'name="h_shell_command"' in page and 'value="echo hello"' in page
    assert 'name="h_http_url"' in page and 'value="https://example.com/hook"' in page
    assert 'name="h_http_method"' in page and 'name="h_http_headers"' in page
    assert 'name="h_python_callable"' in page and 'value="echo"' in page
    assert 'name="handler_mode" value="fields"' in page and "checked" in page
    assert 'id="schedule-preview"' in page and "/dashboard/schedule-preview?tenant=acme" in page


def test_a_shell_handler_is_saved_from_its_fields(signed_in, tenant):
    response = signed_in.post(
        NEW,
        new_task_post(
            handler_mode="fields",
            h_shell_command="sh -c 'echo \"$GREETING\" world'",
            h_shell_environment="GREETING=hello\nMODE=a=b",
        ),
    )
    assert response.status_code == 302, response.context["form"].errors
    task = TaskDefinition.platform.get(name="made-in-the-form")
    assert task.handler_type == "shell"
    assert task.handler_config["command"] == ["sh", "-c", 'echo "$GREETING" world']
    assert task.handler_config["environment"] == {"GREETING": "hello", "MODE": "a=b"}


def test_switching_to_http_saves_the_http_fields_never_the_shell_template(signed_in, tenant):
    tenant.webhook_allowed_hosts = ["hooks.example.com"]
    tenant.save()
    response = signed_in.post(
        NEW,
        new_task_post(
            handler_type="http",
            handler_mode="fields",
            h_http_method="PUT",
            h_http_url="https://hooks.example.com/in",
            h_http_headers="X-Team: data\nAccept: application/json",
            h_http_body='{"hello": "world"}',
        ),
    )
    assert response.status_code == 302, response.context["form"].errors
    config = TaskDefinition.platform.get(name="made-in-the-form").handler_config
    assert "command" not in config  # the shell template the form started with is gone
    assert config["method"] == "PUT" and config["url"] == "https://hooks.example.com/in"
    assert config["headers"] == {"X-Team": "data", "Accept": "application/json"}
    assert config["body"] == {"hello": "world"}


def test_a_handler_fields_mistake_is_shown_on_that_field_and_saves_nothing(signed_in, tenant):
    response = signed_in.post(
        NEW,
        new_task_post(
            handler_mode="fields", h_shell_command="echo 'unclosed", h_shell_environment="NOEQUALS"
        ),
    )
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert errors["h_shell_command"] == ["cannot split into words: No closing quotation"]
    assert "NAME=value" in " ".join(errors["h_shell_environment"])
    refused = signed_in.post(
        NEW,
        new_task_post(handler_type="http", handler_mode="fields", h_http_url="http://127.0.0.1/"),
    )
    assert refused.status_code == 400
    assert "webhook_allowed_hosts" in " ".join(refused.context["form"].errors["h_http_url"])
    assert not TaskDefinition.platform.filter(name="made-in-the-form").exists()


def test_a_cron_schedule_drops_a_run_at_left_from_a_one_shot(signed_in, tenant):
    response = signed_in.post(NEW, new_task_post(run_at="2031-01-01T00:00:00"))
    assert response.status_code == 302, response.context["form"].errors
    task = TaskDefinition.platform.get(name="made-in-the-form")
    assert task.schedule_type == "cron" and task.run_at is None


def preview(client: Client, **query):
    return client.get("/dashboard/schedule-preview", query)


def test_the_preview_gives_the_next_five_fires_in_the_zone_and_utc(signed_in):
    answer = preview(signed_in, type="cron", expression="30 2 * * *", timezone="America/New_York")
    assert answer.status_code == 200
    body = answer.json()
    assert body["timezone"] == "America/New_York" and len(body["fires"]) == 5
    for fire in body["fires"]:
        assert fire["local"][11:16] == "02:30" or fire["local"][11:16] == "03:00"  # DST rule
        assert fire["utc"].endswith("Z")
    interval = preview(signed_in, type="interval", expression="15m").json()["fires"]
    assert len(interval) == 5
    once = preview(signed_in, type="once", run_at="2031-01-01T09:00:00", timezone="Europe/Paris")
    assert once.json()["fires"] == [
        {"utc": "2031-01-01T08:00:00Z", "local": "2031-01-01T09:00:00+01:00"}
    ]
    assert preview(signed_in, type="manual").json()["fires"] == []


@pytest.mark.parametrize(
    ("query", "field", "words"),
    [
        ({"type": "cron", "expression": "61 * * * *"}, "schedule.expression", "minute"),
        (
            {"type": "cron", "expression": "*/5 * * * *", "timezone": "Mars/Base"},
            "schedule.timezone",
            "Mars/Base",
        ),
        ({"type": "interval", "expression": "soon"}, "schedule.expression", ""),
        ({"type": "weekly"}, "schedule.type", "must be one of"),
        ({"type": "cron", "expression": "* * * * *", "exclude": "[1,"}, "schedule.exclude", "JSON"),
    ],
)
def test_a_bad_schedule_is_answered_with_the_products_message_and_no_fire(
    signed_in, query, field, words
):
    answer = preview(signed_in, **query)
    assert answer.status_code == 200
    body = answer.json()
    assert body["fires"] == []
    assert any(e["field"] == field and words in e["message"] for e in body["errors"]), body


def test_a_value_too_long_to_be_a_schedule_is_a_400(signed_in):
    answer = preview(signed_in, type="cron", expression="x" * 5000)
    assert answer.status_code == 400
    assert any("longer than" in e["message"] for e in answer.json()["errors"])


def test_the_preview_is_for_members_and_another_tenants_task_is_not_found(
    signed_in, tenant, tenant_factory
):
    other, _ = tenant_factory("globex")
    theirs = make_task(other, name="theirs", schedule={"type": "interval", "expression": "7m"})
    mine = make_task(tenant, name="mine", schedule={"type": "interval", "expression": "7m"})
    assert (
        preview(signed_in, type="interval", expression="7m", task=str(theirs.id)).status_code == 404
    )
    assert (
        preview(signed_in, type="interval", expression="7m", task=str(mine.id)).status_code == 200
    )
    anonymous = Client().get(
        "/dashboard/schedule-preview", {"type": "interval", "expression": "7m"}
    )
    assert anonymous.status_code == 302 and "/login" in anonymous["Location"]
