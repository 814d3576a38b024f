"""The worker's Celery tasks: thin, take an id (or a batch of them), call the runner; and
the DAG engine's chord tasks (a fan-out's shards and its join), which run runs too."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from celery import shared_task

from dags.engine.dispatch import MAP_JOIN_TASK, MAP_SHARD_TASK, MAP_SHARDS_TASK, HandOn
from dags.engine.mapping import map_join_by_id
from scheduler_app.ringing.publish import RUN_BATCH_TASK, RUN_EXECUTION_TASK
from workers.celery_outcome import RunDidNotSucceed, batch_outcome, single_run_outcome
from workers.runner import batch_summary, execution_batch_run, execution_run, executions_run

Outcome = TypeVar("Outcome")


def _ring(request, run: Callable[..., Outcome]) -> Outcome:
    """Run what a doorbell rang for, then any DAG node a finishing node handed this process
    (no doorbell rung for it)."""

    delivery = request.delivery_info or {}
    worker_id = request.hostname or "worker"
    tier = getattr(request, "tier", None) or delivery.get("routing_key")
    hand_on = HandOn.for_worker(worker_id=worker_id, tier=tier)
    outcome = run(
        worker_id=worker_id,
        tenant_id=getattr(request, "tenant_id", None),
        queue=tier,
        hand_on=hand_on,
    )
    _run_handed_on(hand_on)
    return outcome


def _run_handed_on(hand_on: HandOn) -> None:
    """Each DAG node a finishing node handed on to this process, in turn, while the
    hand-on's time budget lasts (it offers nothing once it is spent)."""
    while (follow := hand_on.take()) is not None:
        execution_run(execution_id=follow, worker_id=hand_on.worker_id, hand_on=hand_on)


# The doorbells' Celery state tells the runs' outcome (workers.celery_outcome): FAILURE when
# a run failed, raised after the run was recorded; the message is acknowledged either way.
@shared_task(
    name=RUN_EXECUTION_TASK,
    bind=True,
    acks_late=True,
    ignore_result=True,
    throws=(RunDidNotSucceed,),
)
def run_execution(self, execution_id: str) -> str:
    outcome = _ring(self.request, lambda **where: execution_run(execution_id=execution_id, **where))
    return single_run_outcome(execution_id, outcome)


@shared_task(
    name=RUN_BATCH_TASK,
    bind=True,
    acks_late=True,
    ignore_result=True,
    throws=(RunDidNotSucceed,),
)
def run_execution_batch(self, execution_ids: list[str]) -> str:
    counts = _ring(
        self.request, lambda **where: executions_run(execution_ids=execution_ids, **where)
    )
    return batch_outcome(batch_summary(len(execution_ids), counts), counts)


# The chord's tasks keep the names the engine signs them with (dags.engine.dispatch).
@shared_task(name=MAP_SHARD_TASK, bind=True, acks_late=True, ignore_result=False)
def run_map_shard(self, execution_id: str) -> str:
    """A chord header member: runs the shard like any execution (the claim dedupes)."""

    return execution_run(execution_id=execution_id, worker_id=self.request.hostname or "worker")


@shared_task(name=MAP_SHARDS_TASK, bind=True, acks_late=True, ignore_result=False)
def run_map_shards(self, execution_ids: list[str]) -> str:
    """A chord header member with several shards: run as a batch (one claim for all)."""

    return execution_batch_run(
        execution_ids=execution_ids, worker_id=self.request.hostname or "worker"
    )


@shared_task(name=MAP_JOIN_TASK, bind=True, acks_late=True, ignore_result=True)
def join_map(self, run_id: str, node_id: str) -> bool:
    # The joined node's successor may be run right here (see dags.engine.dispatch).
    hand_on = HandOn.for_worker(
        worker_id=self.request.hostname or "worker",
        tier=(self.request.delivery_info or {}).get("routing_key"),
    )
    joined = map_join_by_id(run_id=run_id, node_id=node_id, hand_on=hand_on)
    _run_handed_on(hand_on)
    return joined
