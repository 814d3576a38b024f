"""Run one execution attempt: claim, execute the handler, finish. Called by the Celery task."""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.utils import timezone

from scheduler_app.fairness import fair_release
from scheduler_app.services.executions import execution_claim, execution_finish
from scheduler_app.services.quotas import compute_seconds_add, quota_enforce_on_claim
from scheduler_app.services.secrets import referenced_names, secrets_resolve, substitute
from workers.handlers import mask_outcome, run_handler
from workers.handlers.base import BufferedLogSink, HandlerContext, HandlerOutcome
from workers.lease import LeaseKeeper

logger = logging.getLogger(__name__)


class _SecretUnavailable(Exception):
    pass


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
    task, execution = claim.task, claim.execution
    deferral = quota_enforce_on_claim(execution=execution, claim_token=claim.claim_token)
    if deferral is not None:
        logger.info("execution %s deferred: tenant over %s", execution_id, deferral.quota)
        return "deferred"
    parameters = {**(task.parameters or {}), **(execution.parameters or {})}
    handler_config = task.handler_config
    # `{{secret:name}}` is resolved here and only here, for this execution's tenant; the
    # plaintext lives in this process's memory for the attempt and is masked everywhere.
    secret_values: dict[str, str] = {}
    secret_error = ""
    try:
        secret_values = secrets_resolve(
            tenant_id=execution.tenant_id,
            names=referenced_names(handler_config) | referenced_names(parameters),
        )
        handler_config = substitute(handler_config, secret_values)
        parameters = substitute(parameters, secret_values)
    except KeyError as error:
        secret_error = f"unknown secret(s) referenced: {error.args[0]}"
    except ValueError as error:
        secret_error = str(error)
    masked = tuple(value for value in secret_values.values() if value)
    sink = BufferedLogSink(max_bytes=config["LOG_MAX_BYTES"], secrets=masked)
    cancel_event = threading.Event()
    from dags.services.hooks import dag_upstream_results

    context = HandlerContext(
        execution_id=str(execution.id),
        attempt=execution.attempt,
        timeout_seconds=float(task.timeout_seconds),
        parameters=parameters,
        log=sink,
        cancel_event=cancel_event,
        secrets_to_mask=masked,
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
            if secret_error:
                raise _SecretUnavailable(secret_error)
            handler_outcome = run_handler(
                handler_config,
                context,
                allowed_hosts=config["HTTP_ALLOWED_HOSTS"],
                container_runtime=config["CONTAINER_RUNTIME"],
                kill_grace_seconds=config["KILL_GRACE_SECONDS"],
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
    handler_outcome = mask_outcome(handler_outcome, masked)
    report = execution_finish(
        execution_id=execution.id,
        claim_token=claim.claim_token,
        outcome=handler_outcome,
        log_text=sink.text(),
        log_truncated=sink.truncated,
    )
    if execution.started_at is not None:
        compute_seconds_add(
            tenant_id=execution.tenant_id,
            seconds=(timezone.now() - execution.started_at).total_seconds(),
        )
    return handler_outcome.status if report.accepted else "rejected"
