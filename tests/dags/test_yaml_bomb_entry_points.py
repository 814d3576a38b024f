"""The review's YAML alias bomb (509 bytes that stood for a 124.7 MB spec: 16 s and 1.16 GB of
the web worker, and 10 s for every later GET of the DAG), played against every place a
definition is read on the server: refused at once, naming the alias, with nothing stored.
(`schedctl apply` reads files with the same loader: tests/cli/test_schedctl_yaml_bomb.py.)"""

from __future__ import annotations

import io
import json
import time

import pytest
from django.core.management import call_command
from django.test import Client

from dags.models import Dag
from scheduler_app.models import TaskDefinition
from tests.dashboard.test_task_form import form_data
from tests.yaml_bomb import YAML_BOMB

pytestmark = pytest.mark.django_db

# Generous for a loaded machine; the bomb took 16 s before.
QUICK_SECONDS = 2.0


@pytest.fixture
def signed_in(tenant_and_user) -> Client:
    client = Client()
    assert client.login(username=tenant_and_user[1].username, password="pw-123456")
    return client


def _timed(call):
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


def test_the_dashboards_dag_editor_refuses_the_bomb_at_its_line(signed_in, tenant):
    response, seconds = _timed(
        lambda: signed_in.post("/dashboard/dags/new", {"definition": YAML_BOMB})
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "YAML anchors are not allowed (&amp;a)" in page
    assert 'data-line="4"' in page and "Line 4" in page
    assert seconds < QUICK_SECONDS
    assert not Dag.platform.exists()


def test_the_dashboards_dag_editor_refuses_a_document_past_the_size_cap(
    signed_in, tenant, settings
):
    settings.DEFINITION_MAX_DOCUMENT_BYTES = 1000
    text = "dag: big\ndescription: " + "x" * 1000 + "\ntasks: [{id: a, handler: noop}]\n"
    response = signed_in.post("/dashboard/dags/new", {"definition": text})
    assert response.status_code == 400
    assert "at most 1000 are allowed" in response.content.decode()
    assert not Dag.platform.exists()


def test_the_dashboards_task_editor_takes_json_only_and_refuses_the_bomb(signed_in, tenant):
    response = signed_in.post(
        "/dashboard/tasks/new", form_data(None, name="t", parameters=YAML_BOMB)
    )
    assert response.status_code in (200, 400)
    assert "not valid JSON" in response.content.decode()
    assert not TaskDefinition.platform.filter(tenant=tenant).exists()


def test_the_api_takes_json_only_and_refuses_the_bomb(api):
    as_yaml, seconds = _timed(
        lambda: api.post("/api/v1/dags", YAML_BOMB, content_type="application/yaml")
    )
    assert as_yaml.status_code == 415
    assert seconds < QUICK_SECONDS
    as_text = api.post("/api/v1/dags", json.dumps(YAML_BOMB), content_type="application/json")
    assert as_text.status_code == 400
    assert not Dag.platform.exists()


def test_the_api_refuses_a_definition_past_the_stored_size_cap(api, settings):
    settings.DEFINITION_MAX_STORED_BYTES = 2000
    raw = {
        "dag": "wide",
        "parameters": {"blob": "x" * 2000},
        "tasks": [{"id": "a", "handler": {"type": "python", "callable": "noop"}}],
    }
    response = api.post("/api/v1/dags", raw, format="json")
    assert response.status_code == 413
    body = response.json()
    assert body["code"] == "too_large" and "as stored JSON; at most 2000" in body["message"]
    assert not Dag.platform.exists()


def test_sync_dags_reports_the_bomb_and_stores_nothing(tenant, tmp_path):
    (tmp_path / "bomb.yaml").write_text(f"tenant: {tenant.slug}\n{YAML_BOMB}")
    err = io.StringIO()
    _, seconds = _timed(
        lambda: call_command("sync_dags", dir=str(tmp_path), stdout=io.StringIO(), stderr=err)
    )
    assert "bomb.yaml: cannot parse: YAML anchors are not allowed (&a)" in err.getvalue()
    assert seconds < QUICK_SECONDS
    assert not Dag.platform.exists()


def test_sync_dags_refuses_a_file_past_the_size_cap(tenant, tmp_path, settings):
    settings.DEFINITION_MAX_DOCUMENT_BYTES = 100
    (tmp_path / "big.json").write_text(json.dumps({"tenant": tenant.slug, "dag": "x" * 200}))
    err = io.StringIO()
    call_command("sync_dags", dir=str(tmp_path), stdout=io.StringIO(), stderr=err)
    assert "big.json: cannot parse: the file is" in err.getvalue()
    assert not Dag.platform.exists()
