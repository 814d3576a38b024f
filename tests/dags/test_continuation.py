"""Hand-on (in-process continuation) and sticky hints when a DAG node finishes (real PostgreSQL and
Redis; the node's execution is claimed and finished through the ordinary services)."""

from __future__ import annotations

import time

import pytest

from dags.engine.dispatch import HandOn
from dags.models import DagNodeState
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from handler_contract.base import HandlerOutcome
from runs.finish import run_finish
from scheduler_app.models import TaskExecution
from scheduler_app.redis_client import get_redis, redis_key
from scheduler_app.services.claims import execution_claim

pytestmark = pytest.mark.django_db

NOOP = {"type": "python", "callable": "noop"}
WORKER = "upstream-worker@host"


@pytest.fixture
def fan_out_run(tenant):
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "fan",
            "tasks": [
                {"id": "a", "handler": NOOP},
                *({"id": f"b{i}", "handler": NOOP, "depends_on": ["a"]} for i in range(3)),
            ],
        },
    )
    return dag_trigger(dag=dag)


def finish_root(run, django_capture_on_commit_callbacks, hand_on=None) -> dict[str, TaskExecution]:
    """Claim and finish node `a` as worker WORKER, with `hand_on` (a worker's, or none as
    for any other caller); returns the b nodes' executions."""
    root = DagNodeState.objects.get(run=run, node_id="a").execution_id
    claim = execution_claim(execution_id=root, worker_id=WORKER, lease_seconds=60)
    assert claim is not None
    with django_capture_on_commit_callbacks(execute=True):
        report = run_finish(
            execution_id=root,
            claim_token=claim.claim_token,
            outcome=HandlerOutcome("success"),
            hand_on=hand_on,
        )
    assert report.accepted
    states = DagNodeState.objects.filter(run=run, node_id__startswith="b")
    return {s.node_id: TaskExecution.platform.get(id=s.execution_id) for s in states}


def sticky_hint(execution: TaskExecution) -> str | None:
    return get_redis().get(redis_key(f"sticky:{execution.id}"))


def test_the_finishing_worker_keeps_one_successor_and_the_others_ring_sticky(
    fan_out_run, django_capture_on_commit_callbacks
):
    hand_on = HandOn.for_worker(worker_id=WORKER, tier="normal")
    successors = finish_root(fan_out_run, django_capture_on_commit_callbacks, hand_on)
    kept = hand_on.take()
    assert hand_on.take() is None  # one per finished node
    assert len(successors) == 3
    assert all(e.status == "queued" for e in successors.values())
    assert kept in {str(e.id) for e in successors.values()}
    for execution in successors.values():
        # The kept one rings no doorbell; the others prefer the worker of their upstream.
        assert sticky_hint(execution) == (None if str(execution.id) == kept else WORKER)
        # The kept row names its worker (the dead-worker reaper rings it if that one dies
        # before claiming it); the others are anybody's.
        assert execution.worker_id == (WORKER if str(execution.id) == kept else "")


def test_nothing_is_kept_without_a_workers_hand_on(fan_out_run, django_capture_on_commit_callbacks):
    successors = finish_root(fan_out_run, django_capture_on_commit_callbacks)
    assert all(sticky_hint(e) == WORKER for e in successors.values())


def test_a_successor_of_another_tier_is_not_kept(fan_out_run, django_capture_on_commit_callbacks):
    hand_on = HandOn.for_worker(worker_id=WORKER, tier="critical")
    successors = finish_root(fan_out_run, django_capture_on_commit_callbacks, hand_on)
    assert hand_on.take() is None
    assert all(sticky_hint(e) == WORKER for e in successors.values())


def test_nothing_is_kept_once_the_time_budget_is_spent(
    fan_out_run, django_capture_on_commit_callbacks, settings
):
    settings.DAG_CONTINUATION_SECONDS = 0.01
    hand_on = HandOn.for_worker(worker_id=WORKER, tier="normal")
    time.sleep(0.02)
    finish_root(fan_out_run, django_capture_on_commit_callbacks, hand_on)
    assert hand_on.take() is None


def test_a_rolled_back_finish_hands_nothing_over(fan_out_run):
    from django.db import transaction

    root = DagNodeState.objects.get(run=fan_out_run, node_id="a").execution_id
    claim = execution_claim(execution_id=root, worker_id=WORKER, lease_seconds=60)
    hand_on = HandOn.for_worker(worker_id=WORKER, tier="normal")
    with pytest.raises(RuntimeError), transaction.atomic():
        run_finish(
            execution_id=root,
            claim_token=claim.claim_token,
            outcome=HandlerOutcome("success"),
            hand_on=hand_on,
        )
        raise RuntimeError("the commit never happens")
    assert hand_on.take() is None
    waiting = DagNodeState.objects.filter(run=fan_out_run, node_id__startswith="b")
    assert set(waiting.values_list("status", flat=True)) == {"waiting"}
