"""A run's finish on the worker: the outcome stored with its log (`runs.finish`: one
statement, settled in its transaction), then the end-of-run Redis writes in one pipeline
and the live tail's end. One run (a failure, a retry, a DAG node) finishes at once; a
batch's plain successes finish together."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from time import time_ns

from dags.engine.dispatch import HandOn
from runs.finish import run_finish, runs_finish
from scheduler_app.db_retry import database_retry
from scheduler_app.redis_client import get_redis
from scheduler_app.redis_coalesce import CoalescedWrites
from scheduler_app.services.claims import Claim
from scheduler_app.services.executions import Ended
from scheduler_app.services.log_quota import stored_log
from tracing.state import tracer
from workers.execute import Executed
from workers.live_logs import live_tails_close
from workers.run_ledger import RunLedger
from workers.run_traces import RunTrace, finish_span, finishes_traced

logger = logging.getLogger(__name__)


@dataclass
class Done:
    """A claimed run whose handler ended, waiting to be finished with others."""

    claim: Claim
    executed: Executed
    started_at: datetime
    completed_at: datetime
    trace: RunTrace | None = None


def finish_claimed(
    claim: Claim,
    executed: Executed,
    *,
    worker_id: str,
    started_at: datetime | None = None,
    hand_on: HandOn | None = None,
    run_trace: RunTrace | None = None,
) -> tuple[str, bool]:
    """Record the outcome (one statement), then the end-of-run Redis writes (the live tail's
    end on the live-log Redis, apart); returns the status and whether the finish was
    accepted. `started_at`: the handler's real start, when it began later than the claim (a
    run claimed ahead of its time, a batch's runs). `hand_on`: the worker's, for a DAG
    node's successor it may run next (`dags.engine.dispatch`)."""
    handler_outcome, sink = executed.outcome, executed.sink
    end_pipe = get_redis().pipeline(transaction=False)
    log_text, log_truncated = stored_log(
        tenant=claim.execution.tenant, text=sink.buffer.text(), truncated=sink.buffer.truncated
    )
    with finish_span(run_trace):
        # The primary lost mid-finish: the finish again on the promoted one, rather than a
        # run whose lease expires and whose next attempt runs it a second time. A finish
        # that had committed is refused the second time by its claim token (0 rows).
        report = database_retry(
            lambda: run_finish(
                claim=claim,
                outcome=handler_outcome,
                log_text=log_text,
                log_truncated=log_truncated,
                metrics_pipe=end_pipe,
                started_at=started_at,
                progress=executed.progress,
                hand_on=hand_on,
            ),
            what="finish",
        )
    status = handler_outcome.status if report.accepted else "rejected"
    RunLedger(worker_id).end_into(
        end_pipe,
        claim,
        errored=handler_outcome.status not in ("success", "skipped"),
        started_at=started_at,
        stored_log=log_text if report.accepted else None,
    )
    _send(end_pipe, claim)
    live_tails_close([(sink, status)])
    return handler_outcome.status, report.accepted


def _send(pipe, claim: Claim) -> None:
    try:
        pipe.execute(raise_on_error=False)
    except Exception:
        logger.exception("could not record the end of run %s", claim.execution.id)


def successes_finish(waiting: Sequence[Done], *, ledger: RunLedger) -> list[str]:
    """Finish a batch's plain successes together: one statement, one pipeline, the live
    tails closed; returns each one's outcome for the worker's log, in order."""
    if not waiting:
        return []
    outcomes: list[str] = []
    writes = CoalescedWrites()
    logs = {
        done.claim.execution.id: stored_log(
            tenant=done.claim.execution.tenant,
            text=done.executed.sink.buffer.text(),
            truncated=done.executed.sink.buffer.truncated,
        )
        for done in waiting
    }
    finish_started_ns = time_ns() if tracer() is not None else 0
    try:
        ended = [
            Ended(
                claim=done.claim,
                outcome=done.executed.outcome,
                started_at=done.started_at,
                completed_at=done.completed_at,
                log_text=logs[done.claim.execution.id][0],
                log_truncated=logs[done.claim.execution.id][1],
                progress=done.executed.progress,
            )
            for done in waiting
        ]
        # As `finish_claimed`: again on a new connection when the primary was lost.
        reports = database_retry(
            lambda: runs_finish(ended, metrics_pipe=writes), what="batch finish"
        )
    except BaseException:
        if finish_started_ns:  # each run's span ends, the statement's failure on it
            finishes_traced(
                [done.trace for done in waiting], started_ns=finish_started_ns, accepted=None
            )
        raise
    accepted_ids = {
        done.claim.execution.id
        for done, report in zip(waiting, reports, strict=True)
        if report.accepted
    }
    if finish_started_ns:
        finishes_traced(
            [done.trace for done in waiting],
            started_ns=finish_started_ns,
            accepted=[report.accepted for report in reports],
        )
    for done in waiting:
        ok = done.claim.execution.id in accepted_ids
        ledger.end_into(
            writes,
            done.claim,
            errored=False,
            started_at=done.started_at,
            stored_log=logs[done.claim.execution.id][0] if ok else None,
        )
        outcomes.append("success" if ok else "rejected")
    try:
        pipe = get_redis().pipeline(transaction=False)
        writes.send_into(pipe)
        pipe.execute(raise_on_error=False)
    except Exception:
        logger.exception("could not record the end of a batch of %s runs", len(waiting))
    live_tails_close(
        (
            done.executed.sink,
            "success" if done.claim.execution.id in accepted_ids else "rejected",
        )
        for done in waiting
    )
    return outcomes
