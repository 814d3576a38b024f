"""A worker's finish: the runs' end and what depends on it, in one transaction, one statement
however many runs end together (a single run is a batch of one)."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from dags.engine.dispatch import HandOn
from runs.settle import run_settled, runs_settled
from scheduler_app.services.executions import (
    Ended,
    FinishReport,
    execution_finish,
    executions_finish,
)


def runs_finish(ended: Sequence[Ended], *, metrics_pipe=None) -> list[FinishReport]:
    """`executions_finish(ended)`, then each accepted run's DAG node, counters (on
    `metrics_pipe` when given, which the caller sends after the commit) and notices, and the
    batch's failure streaks in one statement."""
    with transaction.atomic():
        reports = executions_finish(ended)
        runs_settled(reports, metrics_pipe=metrics_pipe)
        return reports


def run_finish(*, metrics_pipe=None, hand_on: HandOn | None = None, **finish) -> FinishReport:
    """One run's finish (`execution_finish(**finish)`: by its claim, or by its id and claim
    token), settled in the same transaction. A worker passes its `hand_on`: a DAG node's
    successor it may run itself is in it once this returns (`dags.engine.dispatch`)."""
    with transaction.atomic():
        report = execution_finish(**finish)
        if report.accepted:
            run_settled(report=report, metrics_pipe=metrics_pipe, hand_on=hand_on)
        return report
