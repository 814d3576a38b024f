"""Creating and editing a DAG in the dashboard: YAML or JSON text checked by the API's own
code, a refusal at its line and nothing saved; admins only; another tenant's DAG not found."""

from __future__ import annotations

import json

import pytest

from dags.models import Dag, DagVersion
from scheduler_app.choices import Role
from scheduler_app.services.tenants import membership_set
from tests.dashboard.conftest import PIPELINE, make_dag

pytestmark = pytest.mark.django_db

GOOD = """dag: nightly-etl
tasks:
  - id: extract
    handler: {type: python, callable: echo}
  - id: load
    depends_on: [extract]
    handler: {type: python, callable: noop}
"""


def test_a_dag_is_created_from_yaml_and_drawn(signed_in, tenant):
    response = signed_in.post("/dashboard/dags/new", {"definition": GOOD})
    dag = Dag.platform.get(tenant=tenant, name="nightly-etl")
    assert response.status_code == 302 and response["Location"] == f"/dashboard/dags/{dag.id}"
    page = signed_in.get(response["Location"]).content.decode()
    assert 'data-node-id="extract"' in page and 'data-node-id="load"' in page


def test_a_refusal_names_its_line_and_saves_nothing(signed_in, tenant):
    bad = GOOD.replace("depends_on: [extract]", "depends_on: [nowhere]")
    response = signed_in.post("/dashboard/dags/new", {"definition": bad})
    assert response.status_code == 400
    page = response.content.decode()
    assert 'data-line="6"' in page and "Line 6" in page  # the depends_on line
    assert "nowhere" in page  # the text is kept for correcting
    assert not Dag.platform.filter(tenant=tenant).exists()
    broken = signed_in.post("/dashboard/dags/new", {"definition": "dag: x\ntasks: [\n"})
    assert broken.status_code == 400 and "not valid YAML or JSON" in broken.content.decode()


def test_editing_saves_a_new_version_from_json(signed_in, tenant):
    dag = make_dag(tenant)
    form = signed_in.get(f"/dashboard/dags/{dag.id}/edit").content.decode()
    assert "etl-pipeline" in form and 'id="definition"' in form
    changed = {**PIPELINE, "description": "now with a description"}
    response = signed_in.post(f"/dashboard/dags/{dag.id}/edit", {"definition": json.dumps(changed)})
    assert response.status_code == 302
    dag.refresh_from_db()
    assert dag.version == 2 and dag.description == "now with a description"
    assert DagVersion.objects.filter(dag=dag).count() == 2


def test_only_admins_of_the_tenant_may(signed_in, tenant, tenant_and_user, tenant_factory):
    _, user = tenant_and_user
    other, _ = tenant_factory("other")
    theirs = make_dag(other)
    assert signed_in.get(f"/dashboard/dags/{theirs.id}/edit").status_code == 404
    assert (
        signed_in.post(f"/dashboard/dags/{theirs.id}/edit", {"definition": GOOD}).status_code == 404
    )
    membership_set(tenant=tenant, user=user, role=Role.OPERATOR)
    assert signed_in.get("/dashboard/dags/new").status_code == 403
    assert signed_in.post("/dashboard/dags/new", {"definition": GOOD}).status_code == 403
    assert not Dag.platform.filter(tenant=tenant).exists()


def test_the_edit_form_text_is_accepted_back_as_it_is_shown(signed_in, tenant):
    import html
    import re

    dag = make_dag(tenant)
    form = signed_in.get(f"/dashboard/dags/{dag.id}/edit").content.decode()
    text = html.unescape(re.search(r"<textarea[^>]*>(.*?)</textarea>", form, re.S).group(1))
    response = signed_in.post(f"/dashboard/dags/{dag.id}/edit", {"definition": text})
    assert response.status_code == 302, response.content.decode()[-2000:]
