"""Run one execution attempt: claim, execute the handler, finish. Called by the Celery task."""

from __future__ import annotations

import logging
import threading

from django.conf import settings

from scheduler_app.services.executions import execution_claim, execution_finish
from workers.handlers import run_handler
from workers.handlers.base import BufferedLogSink, HandlerContext, HandlerOutcome
from workers.lease import LeaseKeeper

logger = logging.getLogger(__name__)


def execution_run(*, execution_id: str, worker_id: str) -> str:
    """Returns what happened, for the worker's log: 'duplicate', 'rejected' or the status."""
    config = settings.WORKER
    claim = execution_claim(
        execution_id=execution_id, worker_id=worker_id, lease_seconds=config["LEASE_SECONDS"]
    )
    if claim is None:
        # Duplicate delivery, or the run was cancelled/taken meanwhile: nothing to do.
        logger.info("execution %s not claimable; dropping the message", execution_id)
        return "duplicate"
    task, execution = claim.task, claim.execution
    parameters = {**(task.parameters or {}), **(execution.parameters or {})}
    sink = BufferedLogSink(max_bytes=config["LOG_MAX_BYTES"])
    cancel_event = threading.Event()
    from dags.services.hooks import dag_upstream_results

    context = HandlerContext(
        execution_id=str(execution.id),
        attempt=execution.attempt,
        timeout_seconds=float(task.timeout_seconds),
        parameters=parameters,
        log=sink,
        cancel_event=cancel_event,
        upstream_results=dag_upstream_results(execution=execution),
    )
    give_up_after = task.timeout_seconds + 2 * config["KILL_GRACE_SECONDS"] + 30
    with LeaseKeeper(
        execution_id=str(execution.id),
        claim_token=claim.claim_token,
        lease_seconds=config["LEASE_SECONDS"],
        give_up_after=give_up_after,
        on_lost=cancel_event,
    ):
        try:
            handler_outcome = run_handler(
                task.handler_config,
                context,
                allowed_hosts=config["HTTP_ALLOWED_HOSTS"],
                container_runtime=config["CONTAINER_RUNTIME"],
                kill_grace_seconds=config["KILL_GRACE_SECONDS"],
            )
        except Exception as error:  # a bug in a handler must still end the attempt
            logger.exception("handler of execution %s crashed", execution.id)
            handler_outcome = HandlerOutcome(
                status="failed",
                error_message=f"{type(error).__name__}: {error}",
                error_class=f"exception:{type(error).__name__}",
            )
    report = execution_finish(
        execution_id=execution.id,
        claim_token=claim.claim_token,
        outcome=handler_outcome,
        log_text=sink.text(),
        log_truncated=sink.truncated,
    )
    return handler_outcome.status if report.accepted else "rejected"
