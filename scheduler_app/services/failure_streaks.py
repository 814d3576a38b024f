"""A task's run of consecutive failures (`TaskDefinition.consecutive_failures`), kept in the
transaction that ended its runs: +1 for each run that ended failed for good (its last attempt
failed, or it went to the dead-letter queue; a run counts once, not once per attempt), back
to 0 on a success. The runbook (`policy.pause_after_failures`) acts when it crosses the
threshold, and the first success after failures is announced (`notifications.on_recovery`).

One statement per batch of finishes, however many runs and tasks it holds: the counter moves
in PostgreSQL (`consecutive_failures + n`, never a value read into Python), under the row
lock the statement takes, so two workers ending failures of one task at once count both and
see the threshold crossed once between them."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from django.db import connection

from scheduler_app.models import TaskDefinition


@dataclass
class StreakTally:
    """What one batch of finishes did to one task's streak, in the order they ended.
    `reset`: a success among them; `failures_before_success`: the failures before its first
    one (they precede the recovery); `trailing_failures`: those after its last one (or all,
    without a success). `runbook_retry_failed`: one of the trailing failures was the
    runbook's own retry. The execution ids say which run to name in a notice."""

    task_id: uuid.UUID
    reset: bool = False
    failures_before_success: int = 0
    trailing_failures: int = 0
    runbook_retry_failed: bool = False
    last_failed_execution_id: uuid.UUID | None = None
    recovered_execution_id: uuid.UUID | None = None

    def failed(self, *, execution_id: uuid.UUID, runbook_retry: bool) -> None:
        self.trailing_failures += 1
        self.runbook_retry_failed = self.runbook_retry_failed or runbook_retry
        self.last_failed_execution_id = execution_id

    def succeeded(self, *, execution_id: uuid.UUID) -> None:
        if not self.reset:
            self.reset = True
            self.failures_before_success = self.trailing_failures
            self.recovered_execution_id = execution_id
        self.trailing_failures = 0
        self.runbook_retry_failed = False
        self.last_failed_execution_id = None


@dataclass(frozen=True)
class StreakChange:
    """A task's streak after the statement. `crossed`: the runbook is due (the count reached
    `pause_after_failures` here, or the runbook's retry failed with the count at or past it).
    `recovered_after`: the failures a success ended (0: none, no recovery to announce)."""

    tally: StreakTally
    failures: int
    pause_after_failures: int | None
    crossed: bool
    recovered_after: int


@cache
def _count_sql() -> str:
    table = TaskDefinition._meta.db_table
    # The CTE locks the rows in id order (two batches naming the same tasks cannot deadlock)
    # and keeps the count as it was, which the recovery notice needs; under READ COMMITTED a
    # locked row is re-read at its latest version, so `previous` is never stale.
    return (
        "WITH u AS (SELECT * FROM unnest(%s::uuid[], %s::boolean[], %s::integer[]) "  # noqa: S608
        "AS u(id, reset, failed_runs)), "
        f"previous AS (SELECT t.id, t.consecutive_failures AS failures FROM {table} t "
        "JOIN u ON u.id = t.id ORDER BY t.id FOR UPDATE OF t) "
        f"UPDATE {table} t SET consecutive_failures = CASE WHEN u.reset THEN u.failed_runs "
        "ELSE t.consecutive_failures + u.failed_runs END "
        "FROM u JOIN previous ON previous.id = u.id WHERE t.id = u.id "
        "RETURNING t.id, previous.failures, t.consecutive_failures, t.pause_after_failures"
    )


def task_failure_streaks_count(tallies: Sequence[StreakTally]) -> list[StreakChange]:
    """Move each tallied task's streak; call inside the transaction that ended the runs."""
    if not tallies:
        return []
    by_task = {tally.task_id: tally for tally in tallies}
    with connection.cursor() as cursor:
        cursor.execute(
            _count_sql(),
            [
                list(by_task),
                [tally.reset for tally in by_task.values()],
                [tally.trailing_failures for tally in by_task.values()],
            ],
        )
        rows = cursor.fetchall()
    return [
        _change(by_task[task_id], previous, failures, threshold)
        for task_id, previous, failures, threshold in rows
    ]


def _change(
    tally: StreakTally, previous: int, failures: int, threshold: int | None
) -> StreakChange:
    base = 0 if tally.reset else previous
    crossed = threshold is not None and (
        base < threshold <= failures or (tally.runbook_retry_failed and failures >= threshold)
    )
    recovered_after = previous + tally.failures_before_success if tally.reset else 0
    return StreakChange(
        tally=tally,
        failures=failures,
        pause_after_failures=threshold,
        crossed=crossed,
        recovered_after=recovered_after,
    )
