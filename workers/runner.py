"""Run one execution attempt: claim, execute the handler, finish. Called by the Celery task."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils import timezone

from scheduler_app.fairness import fair_release
from scheduler_app.services.executions import Claim, execution_claim, execution_finish
from scheduler_app.services.quotas import compute_seconds_add, quota_enforce_on_claim
from scheduler_app.services.retry_budget import retry_budget_note_execution
from scheduler_app.services.secrets import referenced_names, secrets_resolve, substitute
from workers import registry
from workers.control import CancelWatcher
from workers.handlers import mask_outcome, run_handler
from workers.handlers.base import HandlerContext, HandlerOutcome
from workers.lease import LeaseKeeper
from workers.live_logs import LiveLogSink

logger = logging.getLogger(__name__)


class _SecretUnavailable(Exception):
    pass


@dataclass(frozen=True)
class _Resolved:
    """The handler config and parameters with `{{secret:name}}` filled in, and what to mask."""

    handler_config: dict[str, Any]
    parameters: dict[str, Any]
    masked: tuple[str, ...]
    error: str = ""


def execution_run(
    *, execution_id: str, worker_id: str, tenant_id: str | None = None, queue: str | None = None
) -> str:
    """Returns what happened, for the worker's log: 'duplicate', 'deferred', 'rejected' or the
    status."""
    config = settings.WORKER
    fair_release(execution_id=execution_id, tenant_id=tenant_id, queue=queue)
    claim = execution_claim(
        execution_id=execution_id, worker_id=worker_id, lease_seconds=config["LEASE_SECONDS"]
    )
    if claim is None:
        # Duplicate delivery, or the run was cancelled/taken meanwhile: nothing to do.
        logger.info("execution %s not claimable; dropping the message", execution_id)
        return "duplicate"
    deferral = quota_enforce_on_claim(execution=claim.execution, claim_token=claim.claim_token)
    if deferral is not None:
        logger.info("execution %s deferred: tenant over %s", execution_id, deferral.quota)
        return "deferred"
    _note_start(worker_id)
    try:
        status, accepted = _run_claimed(claim)
    except BaseException:
        _note_end(worker_id, errored=True)
        raise
    _note_end(worker_id, errored=status != "success")
    execution = claim.execution
    if execution.started_at is not None:
        compute_seconds_add(
            tenant_id=execution.tenant_id,
            seconds=(timezone.now() - execution.started_at).total_seconds(),
        )
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


def _resolve_secrets(claim: Claim) -> _Resolved:
    """`{{secret:name}}` is resolved here and only here, for this execution's tenant; the
    plaintext lives in this process's memory for the attempt and is masked everywhere."""
    task, execution = claim.task, claim.execution
    handler_config = task.handler_config
    parameters = {**(task.parameters or {}), **(execution.parameters or {})}
    try:
        values = secrets_resolve(
            tenant_id=execution.tenant_id,
            names=referenced_names(handler_config) | referenced_names(parameters),
        )
    except KeyError as error:
        return _Resolved(
            handler_config, parameters, (), f"unknown secret(s) referenced: {error.args[0]}"
        )
    except ValueError as error:
        return _Resolved(handler_config, parameters, (), str(error))
    return _Resolved(
        handler_config=substitute(handler_config, values),
        parameters=substitute(parameters, values),
        masked=tuple(value for value in values.values() if value),
    )


def _run_claimed(claim: Claim) -> tuple[str, bool]:
    from dags.services.hooks import dag_upstream_results

    config = settings.WORKER
    task, execution = claim.task, claim.execution
    resolved = _resolve_secrets(claim)
    sink = LiveLogSink(
        execution_id=str(execution.id), max_bytes=config["LOG_MAX_BYTES"], secrets=resolved.masked
    )
    cancel_event = threading.Event()
    context = HandlerContext(
        execution_id=str(execution.id),
        attempt=execution.attempt,
        timeout_seconds=float(task.timeout_seconds),
        parameters=resolved.parameters,
        log=sink,
        cancel_event=cancel_event,
        secrets_to_mask=resolved.masked,
        upstream_results=dag_upstream_results(execution=execution),
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
            if resolved.error:
                raise _SecretUnavailable(resolved.error)
            handler_outcome = run_handler(
                resolved.handler_config,
                context,
                allowed_hosts=config["HTTP_ALLOWED_HOSTS"],
                container_runtime=config["CONTAINER_RUNTIME"],
                kill_grace_seconds=config["KILL_GRACE_SECONDS"],
                shell_run_as=settings.FLEET["SHELL_RUN_AS_USER"] or None,
            )
        except _SecretUnavailable as error:
            handler_outcome = HandlerOutcome(
                status="failed", error_message=str(error), error_class="secret", transient=False
            )
        except Exception as error:  # a bug in a handler must still end the attempt
            logger.exception("handler of execution %s crashed", execution.id)
            handler_outcome = HandlerOutcome(
                status="failed",
                error_message=f"{type(error).__name__}: {error}",
                error_class=f"exception:{type(error).__name__}",
            )
    handler_outcome = mask_outcome(handler_outcome, resolved.masked)
    report = execution_finish(
        execution_id=execution.id,
        claim_token=claim.claim_token,
        outcome=handler_outcome,
        log_text=sink.buffer.text(),
        log_truncated=sink.buffer.truncated,
    )
    sink.end(status=handler_outcome.status if report.accepted else "rejected")
    return handler_outcome.status, report.accepted
