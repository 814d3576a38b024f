"""The worker's one Celery task: thin, takes an id, calls the runner."""

from __future__ import annotations

from celery import shared_task

from scheduler_app.dispatch import RUN_EXECUTION_TASK


@shared_task(name=RUN_EXECUTION_TASK, bind=True, acks_late=True, ignore_result=True)
def run_execution(self, execution_id: str) -> str:
    from workers.runner import execution_run

    delivery = self.request.delivery_info or {}
    return execution_run(
        execution_id=execution_id,
        worker_id=self.request.hostname or "worker",
        tenant_id=getattr(self.request, "tenant_id", None),
        queue=getattr(self.request, "tier", None) or delivery.get("routing_key"),
    )
