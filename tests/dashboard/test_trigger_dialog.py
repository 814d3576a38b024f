"""Trigger with parameters from the dashboard: the form is generated from the declared
parameters (one typed input each, defaults filled in), judged on the server as the API's
trigger is (errors next to the input, nothing created), with a JSON view of the same values;
a viewer and another tenant get nothing."""

from __future__ import annotations

import pytest
from django.test import Client

from dags.models import DagRun
from dags.services.definitions import dag_create
from scheduler_app.choices import Role
from scheduler_app.models import AuditEntry, TaskExecution, TenantMembership
from tests.factories import make_task

pytestmark = pytest.mark.django_db

DECLARED = {
    "limit": 10,
    "ratio": 0.5,
    "dry": False,
    "day": "2030-01-01",
    "since": "2030-01-01T00:00:00Z",
    "region": "eu",
    "tags": ["a"],
    "account": None,
}


def _field_of(page: str, name: str) -> str:
    """The HTML of the form field holding the input named `name`."""
    at = page.index(f'name="{name}"')
    return page[page.rindex('<div class="field', 0, at) : page.index("</div>", at)]


def _task(tenant, **overrides):
    return make_task(tenant, name="exporter", parameters=DECLARED, **overrides)


def _post(task, **overrides):
    body = {
        "parameters_mode": "fields",
        "param.limit": "25",
        "param.ratio": "0.75",
        "param.dry": "on",
        "param.day": "2030-02-03",
        "param.since": "2030-02-03T04:05:06Z",
        "param.region": "us",
        "param.tags": '["x", "y"]',
        "param.account": "acct-9",
    }
    body.update(overrides)
    return body


def test_the_task_page_dialog_has_one_typed_input_per_declared_parameter(signed_in, tenant):
    task = _task(tenant)
    page = signed_in.get(f"/dashboard/tasks/{task.id}").content.decode()
    assert 'id="trigger-dialog"' in page and 'data-open-dialog="trigger-dialog"' in page
    assert 'name="param.limit" value="10"' in page and 'type="number" step="1"' in page
    assert 'name="param.ratio" value="0.5"' in page and 'step="any"' in page
    assert 'name="param.dry" data-param="dry" data-kind="boolean">' in page  # unchecked
    assert 'name="param.day" value="2030-01-01"' in page and 'type="date"' in page
    assert 'name="param.since" value="2030-01-01T00:00:00Z"' in page
    assert 'name="param.tags" rows="2"' in page and "[&quot;a&quot;]" in page
    assert 'account <span class="required">(required)</span>' in page
    # The JSON view holds the same defaults.
    assert "&quot;limit&quot;: 10" in page


def test_a_trigger_with_fields_starts_a_run_with_those_typed_values(signed_in, tenant):
    task = _task(tenant)
    response = signed_in.post(f"/dashboard/tasks/{task.id}/trigger/parameters", _post(task))
    assert response.status_code == 302, response.content.decode()
    run = TaskExecution.platform.get(task=task)
    assert response["Location"] == f"/dashboard/executions/{run.id}"
    assert run.parameters == {
        "limit": 25,
        "ratio": 0.75,
        "dry": True,
        "day": "2030-02-03",
        "since": "2030-02-03T04:05:06Z",
        "region": "us",
        "tags": ["x", "y"],
        "account": "acct-9",
    }
    entry = AuditEntry.platform.get(action="task.trigger")
    assert entry.object_id == str(task.id) and entry.detail["via"] == "dashboard"
    assert entry.detail["after"]["run"] == str(TaskExecution.platform.get(task=task).id)


def test_bad_values_are_shown_next_to_their_inputs_and_nothing_is_created(signed_in, tenant):
    task = _task(tenant)
    body = _post(task, **{"param.limit": "ten", "param.day": "someday", "param.account": ""})
    body["param.tags"] = "[1,"
    response = signed_in.post(f"/dashboard/tasks/{task.id}/trigger/parameters", body)
    assert response.status_code == 400
    page = response.content.decode()
    assert "must be a whole number" in _field_of(page, "param.limit")
    assert 'value="ten"' in _field_of(page, "param.limit")  # what was typed is kept
    assert "default 10" in _field_of(page, "param.limit")
    assert "must be a date, YYYY-MM-DD" in _field_of(page, "param.day")
    assert "JSON value: not valid JSON" in _field_of(page, "param.tags")
    assert "required: this parameter has no default" in _field_of(page, "param.account")
    assert "has-error" not in _field_of(page, "param.region")
    assert not TaskExecution.platform.filter(task=task).exists()
    assert not AuditEntry.platform.filter(action="task.trigger").exists()


def test_the_json_view_is_judged_as_the_apis_trigger_body(signed_in, tenant):
    task = _task(tenant)
    url = f"/dashboard/tasks/{task.id}/trigger/parameters"
    for text, problem in [
        ("[1, 2]", "must be a JSON object"),
        ('{"limit": ', "not valid JSON"),
        ('{"limit": 3}', "account is required"),
        ('{"account": "{{secret:db}}"}', "secret"),
    ]:
        response = signed_in.post(url, {"parameters_mode": "json", "parameters_json": text})
        assert response.status_code == 400, text
        assert problem in response.content.decode(), (text, response.content.decode()[-3000:])
    assert not TaskExecution.platform.filter(task=task).exists()
    ok = signed_in.post(
        url, {"parameters_mode": "json", "parameters_json": '{"account": "a1", "extra": [1]}'}
    )
    assert ok.status_code == 302
    assert TaskExecution.platform.get(task=task).parameters == {"account": "a1", "extra": [1]}


def test_a_task_without_declared_parameters_gets_the_json_view_only(signed_in, tenant):
    task = make_task(tenant, name="plain")
    page = signed_in.get(f"/dashboard/tasks/{task.id}/trigger/parameters").content.decode()
    assert "declares no parameters" in page and 'name="parameters_mode" value="json"' in page
    assert "data-param=" not in page
    response = signed_in.post(
        f"/dashboard/tasks/{task.id}/trigger/parameters",
        {"parameters_mode": "fields", "parameters_json": '{"n": 3}'},
    )
    assert response.status_code == 302
    assert TaskExecution.platform.get(task=task).parameters == {"n": 3}


def test_a_dag_is_triggered_from_its_declared_parameters(signed_in, tenant):
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "nightly",
            "parameters": {"batch": "b-1", "size": 2},
            "tasks": [{"id": "one", "handler": {"type": "python", "callable": "echo"}}],
        },
    )
    page = signed_in.get(f"/dashboard/dags/{dag.id}").content.decode()
    assert 'name="param.batch" value="b-1"' in page and 'name="param.size" value="2"' in page
    assert "{&quot;date&quot;: &quot;2030-01-01&quot;}" not in page  # the old placeholder
    response = signed_in.post(
        f"/dashboard/dags/{dag.id}/trigger/parameters",
        {"parameters_mode": "fields", "param.batch": "b-17", "param.size": "x"},
    )
    assert response.status_code == 400 and not DagRun.platform.filter(dag=dag).exists()
    response = signed_in.post(
        f"/dashboard/dags/{dag.id}/trigger/parameters",
        {"parameters_mode": "fields", "param.batch": "b-17", "param.size": "4"},
    )
    assert response.status_code == 302
    assert DagRun.platform.get(dag=dag).parameters == {"batch": "b-17", "size": 4}


def test_a_viewer_and_another_tenant_cannot_trigger(tenant_and_user, tenant, tenant_factory):
    _tenant, user = tenant_and_user
    mine = _task(tenant)
    other, _ = tenant_factory("globex")
    theirs = make_task(other, name="their-exporter", parameters={"limit": 1})
    admin = Client()
    admin.login(username=user.username, password="pw-123456")
    # Another tenant's task: not found, its page and its trigger; nothing is run.
    assert admin.get(f"/dashboard/tasks/{theirs.id}/trigger/parameters").status_code == 404
    posted = admin.post(
        f"/dashboard/tasks/{theirs.id}/trigger/parameters",
        {"parameters_mode": "fields", "param.limit": "2"},
    )
    assert posted.status_code == 404
    TenantMembership.platform.filter(user=user).update(role=Role.VIEWER)
    viewer = Client()
    viewer.login(username=user.username, password="pw-123456")
    page = viewer.get(f"/dashboard/tasks/{mine.id}").content.decode()
    assert "trigger-dialog" not in page
    refused = viewer.post(f"/dashboard/tasks/{mine.id}/trigger/parameters", _post(mine))
    assert refused.status_code == 403
    assert not TaskExecution.platform.exists()
