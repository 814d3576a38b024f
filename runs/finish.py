"""A worker's finish: the run's end and what depends on it, in one transaction."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from runs.settle import run_settled
from scheduler_app.services.execution_batches import Succeeded, executions_finish_succeeded
from scheduler_app.services.executions import FinishReport, execution_finish


def run_finish(*, metrics_pipe=None, **finish) -> FinishReport:
    """`execution_finish(**finish)`, then its DAG node, counters (on `metrics_pipe` when
    given) and notices, in the same transaction."""
    with transaction.atomic():
        report = execution_finish(**finish)
        if report.accepted:
            run_settled(report=report, metrics_pipe=metrics_pipe)
        return report


def runs_finish_succeeded(succeeded: Sequence[Succeeded], *, metrics_pipe) -> list[Succeeded]:
    """A batch's plain successes (no DAG node among them: those finish one by one), in one
    statement; their counters and notices once it commits."""
    with transaction.atomic():
        accepted = executions_finish_succeeded(succeeded)
        for item in accepted:
            report = FinishReport(accepted=True, execution=item.claim.execution)
            run_settled(report=report, metrics_pipe=metrics_pipe, dag=False)
    return accepted
