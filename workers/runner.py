"""Run one execution attempt: claim, execute the handler, finish. Called by the Celery task."""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.utils import timezone

from scheduler_app.services.executions import Claim, execution_claim, execution_finish
from scheduler_app.services.retry_budget import retry_budget_note_execution
from workers import registry
from workers.control import CancelWatcher
from workers.handlers import run_handler
from workers.handlers.base import HandlerContext, HandlerOutcome
from workers.lease import LeaseKeeper
from workers.live_logs import LiveLogSink

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
    _note_start(worker_id)
    try:
        status, accepted = _run_claimed(claim)
    except BaseException:
        _note_end(worker_id, errored=True)
        raise
    _note_end(worker_id, errored=status != "success")
    return status if accepted else "rejected"


def _note_start(worker_id: str) -> None:
    # Fleet counters are for operators and budgets: a Redis blip must not fail the run.
    try:
        registry.run_started(worker_id)
        retry_budget_note_execution(at=timezone.now())
    except Exception:
        logger.exception("could not count the start of a run")


def _note_end(worker_id: str, *, errored: bool) -> None:
    try:
        registry.run_ended(worker_id, errored=errored)
    except Exception:
        logger.exception("could not count the end of a run")


def _run_claimed(claim: Claim) -> tuple[str, bool]:
    config = settings.WORKER
    task, execution = claim.task, claim.execution
    parameters = {**(task.parameters or {}), **(execution.parameters or {})}
    sink = LiveLogSink(execution_id=str(execution.id), max_bytes=config["LOG_MAX_BYTES"])
    cancel_event = threading.Event()
    context = HandlerContext(
        execution_id=str(execution.id),
        attempt=execution.attempt,
        timeout_seconds=float(task.timeout_seconds),
        parameters=parameters,
        log=sink,
        cancel_event=cancel_event,
    )
    give_up_after = task.timeout_seconds + 2 * config["KILL_GRACE_SECONDS"] + 30
    with (
        sink,
        CancelWatcher(
            execution_id=str(execution.id),
            claim_token=str(claim.claim_token),
            cancel_event=cancel_event,
        ),
        LeaseKeeper(
            execution_id=str(execution.id),
            claim_token=claim.claim_token,
            lease_seconds=config["LEASE_SECONDS"],
            give_up_after=give_up_after,
            on_lost=cancel_event,
        ),
    ):
        try:
            handler_outcome = run_handler(
                task.handler_config,
                context,
                allowed_hosts=config["HTTP_ALLOWED_HOSTS"],
                container_runtime=config["CONTAINER_RUNTIME"],
                kill_grace_seconds=config["KILL_GRACE_SECONDS"],
                shell_run_as=settings.FLEET["SHELL_RUN_AS_USER"] or None,
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
        log_text=sink.buffer.text(),
        log_truncated=sink.buffer.truncated,
    )
    sink.end(status=handler_outcome.status if report.accepted else "rejected")
    return handler_outcome.status, report.accepted
