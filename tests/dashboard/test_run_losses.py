"""A run's worker losses as people see them: each one in the execution's API detail
(`losses`) and on its page's state timeline; another tenant, playing the attacker with the
run's id, gets a 404 that shows none of it."""

from __future__ import annotations

import pytest

from scheduler_app.services.claims import execution_claim
from scheduler_app.services.losses import execution_worker_lost
from scheduler_app.services.task_definitions import task_trigger
from tests.api_clients import member_client
from tests.factories import make_task

pytestmark = pytest.mark.django_db

WORKER = "celery@host-that-died"


def _run_lost_twice_then_failed(tenant, settings):
    settings.FLEET = {**settings.FLEET, "LOST_REQUEUES": 1}
    task = make_task(tenant, name="lost-twice", schedule={"type": "manual"})
    run = task_trigger(task=task)
    for _ in range(2):
        claim = execution_claim(execution_id=run.id, worker_id=WORKER, lease_seconds=30)
        assert execution_worker_lost(
            execution_id=run.id, claim_token=claim.claim_token, worker_id=WORKER, reason="gone"
        ).accepted
    return run


def test_the_detail_lists_each_loss_and_what_it_did(tenant, api, settings):
    run = _run_lost_twice_then_failed(tenant, settings)
    detail = api.get(f"/api/v1/executions/{run.id}").json()
    assert detail["status"] == "failed" and detail["error_class"] == "worker_lost"
    assert [(loss["outcome"], loss["attempt"], loss["worker_id"]) for loss in detail["losses"]] == [
        ("requeued", 1, WORKER),
        ("failed", 1, WORKER),
    ]
    fresh = task_trigger(task=make_task(tenant, name="never-lost", schedule={"type": "manual"}))
    assert api.get(f"/api/v1/executions/{fresh.id}").json()["losses"] == []


def test_the_run_page_shows_each_loss_on_its_timeline(tenant, signed_in, settings):
    run = _run_lost_twice_then_failed(tenant, settings)
    page = signed_in.get(f"/dashboard/executions/{run.id}").content.decode()
    timeline = page.split('id="timeline"')[1].split("</ol>")[0]
    assert timeline.count(f"on {WORKER}: re-queued, the same attempt") == 1
    assert timeline.count(f"on {WORKER}: failed: worker_lost") == 1


def test_another_tenant_sees_no_loss_of_a_run_it_does_not_own(tenant, tenant_factory, settings):
    run = _run_lost_twice_then_failed(tenant, settings)
    attacker_tenant, _ = tenant_factory("attacker")
    attacker, _ = member_client(attacker_tenant, "admin")
    response = attacker.get(f"/api/v1/executions/{run.id}")
    assert response.status_code == 404
    assert WORKER not in response.content.decode()
