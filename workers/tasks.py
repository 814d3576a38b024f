"""The worker's Celery tasks: thin, take an id (or a batch of them), call the runner."""

from __future__ import annotations

from collections.abc import Callable

from celery import shared_task

from dags.services.continuation import continuing
from scheduler_app.ringing.publish import RUN_BATCH_TASK, RUN_EXECUTION_TASK
from workers.runner import execution_batch_run, execution_run


def _ring(request, run: Callable[..., str]) -> str:
    """Run what a doorbell rang for, then any DAG node a finishing node handed this process
    (no doorbell rung for it)."""

    delivery = request.delivery_info or {}
    worker_id = request.hostname or "worker"
    tier = getattr(request, "tier", None) or delivery.get("routing_key")
    with continuing(tier=tier) as next_execution:
        outcome = run(
            worker_id=worker_id, tenant_id=getattr(request, "tenant_id", None), queue=tier
        )
        while (follow := next_execution()) is not None:
            execution_run(execution_id=follow, worker_id=worker_id)
    return outcome


@shared_task(name=RUN_EXECUTION_TASK, bind=True, acks_late=True, ignore_result=True)
def run_execution(self, execution_id: str) -> str:
    return _ring(self.request, lambda **where: execution_run(execution_id=execution_id, **where))


@shared_task(name=RUN_BATCH_TASK, bind=True, acks_late=True, ignore_result=True)
def run_execution_batch(self, execution_ids: list[str]) -> str:
    return _ring(
        self.request, lambda **where: execution_batch_run(execution_ids=execution_ids, **where)
    )
