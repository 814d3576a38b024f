"""The admin edits a DAG definition through the same validation as the API."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model

from dags.models import Dag

pytestmark = pytest.mark.django_db


# The versions inline is read-only, but the admin still expects its management form.
INLINE = {
    "versions-TOTAL_FORMS": "0",
    "versions-INITIAL_FORMS": "0",
    "versions-MIN_NUM_FORMS": "0",
    "versions-MAX_NUM_FORMS": "1000",
}


@pytest.fixture
def admin_client(client):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456")
    client.force_login(user)
    return client


def test_admin_creates_a_dag_and_rejects_a_cycle(admin_client, tenant):
    good = {
        "dag": "from-admin",
        "tasks": [{"id": "a", "handler": {"type": "python", "callable": "noop"}}],
    }
    response = admin_client.post(
        "/admin/dags/dag/add/", {"tenant": str(tenant.id), "definition": json.dumps(good), **INLINE}
    )
    assert response.status_code == 302, response.content[:2000]
    dag = Dag.platform.get(name="from-admin")
    assert admin_client.get(f"/admin/dags/dag/{dag.id}/change/").status_code == 200
    cyclic = {
        "dag": "from-admin",
        "tasks": [
            {"id": "a", "handler": {"type": "python", "callable": "noop"}, "depends_on": ["b"]},
            {"id": "b", "handler": {"type": "python", "callable": "noop"}, "depends_on": ["a"]},
        ],
    }
    response = admin_client.post(
        f"/admin/dags/dag/{dag.id}/change/",
        {"tenant": str(tenant.id), "definition": json.dumps(cyclic), **INLINE},
    )
    assert response.status_code == 200 and b"cycle: " in response.content
    dag.refresh_from_db()
    assert dag.version == 1
    assert admin_client.get("/admin/dags/dag/").status_code == 200
    assert admin_client.get("/admin/dags/dagrun/").status_code == 200


def test_the_admins_run_page_lists_a_rerun_nodes_earlier_attempt(admin_client, tenant):
    from django.utils import timezone

    from dags.models import DagRun
    from dags.services.runs import dag_run_rerun
    from tests.dashboard.conftest import ENDED_RUN_STATES, make_dag, make_dag_run

    run = make_dag_run(make_dag(tenant), ENDED_RUN_STATES)
    DagRun.platform.filter(id=run.id).update(status="failed", completed_at=timezone.now())
    dag_run_rerun(run=run, triggered_by="user:root")
    page = admin_client.get(f"/admin/dags/dagrun/{run.id}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Earlier attempt of a re-run node" in html and "ValueError: boom" in html
    assert "user:root" in html  # the current attempt's, in the nodes inline
