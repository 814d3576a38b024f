"""Running a claimed run's handler: its secrets resolved for its tenant, under the run
watcher (lease, cancel, timeout), at its scheduled time when it was claimed ahead of it
(`workers.due`), after its run key is settled. The outcome comes back masked."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from budgets.limits import BudgetExceeded
from dags.engine.settle import dag_upstream_results
from handler_contract.base import PREEMPTED, HandlerContext, HandlerOutcome, mask_outcome
from scheduler_app.limits import expression_budget
from scheduler_app.platform_tasks import platform_task_prefixes
from scheduler_app.ringing.ring import ring
from scheduler_app.ringing.traces import RingReason
from scheduler_app.services.checkpoints import execution_chain_id
from scheduler_app.services.claims import Claim
from scheduler_app.services.fleet import execution_hand_back
from scheduler_app.services.run_keys import execution_key_settle
from scheduler_app.services.secrets import (
    referenced_names,
    run_parameters_split,
    secrets_resolve,
    substitute,
)
from workers.checkpoints import RunCheckpoints
from workers.due import wait_until_due
from workers.handlers import run_handler
from workers.live_logs import LiveLogSink
from workers.progress import ProgressReporter
from workers.run_traces import RunTrace, handler_span, trace_ids_log, trace_ids_log_end
from workers.run_watch import WatchedRun, run_watcher
from workers.shell_sandbox import shell_sandbox_for

logger = logging.getLogger(__name__)

# How often a keyed run waiting for another run of its key looks again.
KEY_WAIT_POLL_SECONDS = 0.25


class _SecretUnavailable(Exception):
    pass


@dataclass(frozen=True)
class _Resolved:
    """The handler config and parameters with `{{secret:name}}` filled in, and what to mask."""

    handler_config: dict[str, Any]
    parameters: dict[str, Any]
    masked: tuple[str, ...]
    error: str = ""


def _resolve_secrets(claim: Claim) -> _Resolved:
    """`{{secret:name}}` is resolved here and only here, for this execution's tenant, and only
    in what a tenant admin authored (the handler config, the task's and the DAG's parameters):
    parameters that came with a trigger reach the handler as literal text. The plaintext lives
    in this process's memory for the attempt and is masked everywhere."""
    task, execution = claim.task, claim.execution
    handler_config = task.handler_config
    authored, supplied = run_parameters_split(task_parameters=task.parameters, execution=execution)
    parameters = {**authored, **supplied}
    try:
        values = secrets_resolve(
            tenant_id=execution.tenant_id,
            names=referenced_names(handler_config) | referenced_names(authored),
        )
    except KeyError as error:
        return _Resolved(
            handler_config, parameters, (), f"unknown secret(s) referenced: {error.args[0]}"
        )
    except ValueError as error:
        return _Resolved(handler_config, parameters, (), str(error))
    masked = tuple(value for value in values.values() if value)
    # One output budget for the handler config and the parameters together.
    growth = expression_budget().max_output_chars
    try:
        filled = substitute(
            {"handler": handler_config, "parameters": authored}, values, max_growth=growth
        )
    except BudgetExceeded as error:
        return _Resolved(handler_config, parameters, masked, error.message)
    return _Resolved(
        handler_config=filled["handler"],
        parameters={**filled["parameters"], **supplied},
        masked=masked,
    )


@dataclass
class Executed:
    """A handler's outcome (secrets masked) and the log it wrote."""

    outcome: HandlerOutcome
    sink: LiveLogSink
    started_at: datetime  # when the handler started (a run claimed ahead waits for its time)
    progress: dict | None = None  # the last progress the handler reported


def execute_claimed(
    claim: Claim, *, stop_requested: bool, run_trace: RunTrace | None = None
) -> Executed:
    """Run the handler of a claimed execution under the run watcher (lease, cancel, timeout),
    at the run's scheduled time when it was claimed ahead of it (`workers.due`), in its
    handler span while tracing is on (`run_trace`, `workers.run_traces`)."""

    config = settings.WORKER
    task, execution = claim.task, claim.execution
    resolved = _resolve_secrets(claim)
    sink = LiveLogSink(
        execution_id=str(execution.id),
        tenant_id=execution.tenant_id,
        max_bytes=config["LOG_MAX_BYTES"],
        secrets=resolved.masked,
    )
    cancel_event = threading.Event()
    if stop_requested:
        cancel_event.set()  # cancelled while it was queued: the handler does not start
    progress = ProgressReporter(execution_id=str(execution.id), secrets=resolved.masked, live=sink)
    checkpoints = RunCheckpoints(
        tenant_id=execution.tenant_id,
        chain_id=execution_chain_id(
            execution_id=execution.id, root_execution_id=execution.root_execution_id
        ),
        execution_id=execution.id,
        attempt=execution.attempt,
        secrets=resolved.masked,
        known_absent=claim.has_checkpoint is False,
    )
    preempted = threading.Event()
    context = HandlerContext(
        execution_id=str(execution.id),
        attempt=execution.attempt,
        timeout_seconds=float(task.timeout_seconds),
        parameters=resolved.parameters,
        log=sink,
        cancel_event=cancel_event,
        secrets_to_mask=resolved.masked,
        upstream_results=dag_upstream_results(execution=execution),
        progress=progress,
        checkpoints=checkpoints,
        preempted=preempted,
    )
    watched = WatchedRun(
        execution_id=str(execution.id),
        claim_token=claim.claim_token,
        cancel_event=cancel_event,
        lease_seconds=config["LEASE_SECONDS"],
        give_up_after=task.timeout_seconds + 2 * config["KILL_GRACE_SECONDS"] + 30,
        sink=sink,
        progress=progress,
        worker_id=execution.worker_id,
        preempted=preempted,
        checkpoints=checkpoints,
    )
    watcher = run_watcher()
    watcher.watch(watched)
    try:
        wait_until_due(execution.scheduled_at, cancel_event=cancel_event)
        started_at = timezone.now()
        with handler_span(
            run_trace,
            handler_type=task.handler_type,
            execution_id=execution.id,
            attempt=execution.attempt,
        ) as span:
            context.traceparent = span.traceparent
            trace_ids_log(sink, span)
            handler_outcome = _handler_run(claim, context, cancel_event, resolved)
            trace_ids_log_end(sink)
            span.outcome(handler_outcome)
    finally:
        watcher.unwatch(watched)
    # Only a real preemption hands a run back: a handler raising Preempted unasked would
    # otherwise bounce its run between workers for ever (it fails, and is retried, instead).
    if handler_outcome.error_class == PREEMPTED and preempted.is_set():
        _hand_back(claim, sink)
    return Executed(
        outcome=mask_outcome(handler_outcome, resolved.masked),
        sink=sink,
        started_at=started_at,
        progress=progress.latest,
    )


def _hand_back(claim: Claim, sink: LiveLogSink) -> None:
    """The handler stopped for its worker's preemption (its checkpoint saved): the run goes
    back to the queue, the same attempt, for another worker to resume; the finish that
    follows is then refused by the claim token (as for a run the drain released)."""
    execution = claim.execution
    try:
        bell = execution_hand_back(
            execution_id=execution.id,
            claim_token=claim.claim_token,
            tenant_id=execution.tenant_id,
            queue=execution.queue,
            traceparent=execution.traceparent,
        )
    except Exception:  # the drain's deadline (or the reaper) hands it back all the same
        logger.exception("could not hand back preempted run %s", execution.id)
        return
    if bell is not None:
        sink.write("system", "stopped for the worker's preemption: handed back to the queue")
        ring([bell], reason=RingReason.HANDED_BACK)


def _handler_run(
    claim: Claim,
    context: HandlerContext,
    cancel_event: threading.Event,
    resolved: _Resolved,
) -> HandlerOutcome:
    """The handler's outcome: a crash, a secret that cannot be had, a cancel or a settled
    run key each end the attempt as an outcome too."""
    config = settings.WORKER
    execution = claim.execution
    try:
        if resolved.error:
            raise _SecretUnavailable(resolved.error)
        return (
            _cancelled_before_start(cancel_event)
            or _idempotent_outcome(claim, cancel_event)
            or run_handler(
                resolved.handler_config,
                context,
                # The tenant's own allow-list, set by the operator (never another's).
                allowed_hosts=execution.tenant.webhook_allowed_hosts,
                container_runtime=config["CONTAINER_RUNTIME"],
                kill_grace_seconds=config["KILL_GRACE_SECONDS"],
                shell_run_as=settings.FLEET["SHELL_RUN_AS_USER"] or None,
                shell_sandbox=shell_sandbox_for(
                    egress_allowed=execution.tenant.shell_egress_allowed
                ),
                celery_allowed_tasks=settings.CELERY_HANDLER_TASKS,
                platform_task_prefixes=platform_task_prefixes(),
            )
        )
    except _SecretUnavailable as error:
        return HandlerOutcome(
            status="failed", error_message=str(error), error_class="secret", transient=False
        )
    except Exception as error:  # a bug in a handler must still end the attempt
        logger.exception("handler of execution %s crashed", execution.id)
        return HandlerOutcome(
            status="failed",
            error_message=f"{type(error).__name__}: {error}",
            error_class=f"exception:{type(error).__name__}",
        )


def _cancelled_before_start(cancel_event: threading.Event) -> HandlerOutcome | None:
    """A run cancelled while it was queued or waited for its time (or, from
    `_idempotent_outcome`, for its key) is not started, whatever its handler: a `celery` or
    `container` handler does not look at the cancel event before it sends or starts."""
    if not cancel_event.is_set():
        return None
    return HandlerOutcome(
        status="cancelled",
        error_class="cancelled",
        error_message="cancelled before start",
        transient=False,
    )


def _idempotent_outcome(claim: Claim, cancel_event: threading.Event) -> HandlerOutcome | None:
    """The outcome of a keyed run that must not run (its key already succeeded, or cannot be
    rendered); None when the handler should run. While another run of the key is running,
    this one waits for it (under the run watcher: its lease held, a cancel or timeout ends
    the wait, and the handler then does not start)."""
    while True:
        run_key = execution_key_settle(
            execution=claim.execution, task=claim.task, claim_token=claim.claim_token
        )
        if run_key is None or run_key.running_elsewhere is None:
            break
        if cancel_event.wait(KEY_WAIT_POLL_SECONDS):
            return _cancelled_before_start(cancel_event)
    if run_key is None:
        return None
    if run_key.error:
        return HandlerOutcome(
            status="failed",
            error_message=run_key.error,
            error_class="idempotency_key",
            transient=False,
        )
    if run_key.succeeded_before is None:
        return None
    return HandlerOutcome(
        status="skipped",
        result={
            "idempotency_key": run_key.key,
            "skipped_for_execution_id": str(run_key.succeeded_before),
        },
        error_message=(
            f"idempotency key {run_key.key!r} already succeeded in execution "
            f"{run_key.succeeded_before}"
        ),
        transient=False,
    )
