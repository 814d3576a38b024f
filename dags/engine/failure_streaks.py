"""A DAG's run of consecutive failed runs (`Dag.consecutive_failures`), moved in the
transaction that ends a run: +1 for a run that ends `failed`, back to 0 on `success`
(`partially_completed` and `cancelled` leave it as it is: neither is a run of the DAG that
failed as a whole, nor one that worked). In PostgreSQL (`consecutive_failures + 1 ...
RETURNING`) under the DAG row's lock, so concurrent ends count each and cross once.

When the count reaches the DAG's `policy.pause_after_failures` (or the runbook's own retry,
a run triggered "runbook", fails with the count at or past it), the listeners registered here
are told inside the transaction (alerting registers the runbook in its AppConfig.ready and
enqueues it once the transaction commits): the DAG engine knows nothing of alerting, which
sits above it."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from django.db import connection

from dags.choices import RunStatus
from dags.models import Dag, DagRun
from scheduler_app.choices import Trigger


@dataclass(frozen=True)
class DagStreakCrossed:
    dag_id: uuid.UUID
    run_id: uuid.UUID
    failures: int
    runbook_retry_failed: bool


DagStreakListener = Callable[[DagStreakCrossed], None]

_listeners: dict[str, DagStreakListener] = {}


def dag_streak_listener_register(name: str, listener: DagStreakListener) -> None:
    _listeners[name] = listener


@cache
def _count_sql() -> str:
    return (
        f"UPDATE {Dag._meta.db_table} SET consecutive_failures = CASE WHEN %s "  # noqa: S608
        "THEN consecutive_failures + 1 ELSE 0 END "
        "WHERE id = %s AND (%s OR consecutive_failures > 0) "
        "RETURNING consecutive_failures, pause_after_failures"
    )


def dag_run_streak_count(*, run: DagRun, status: str) -> int | None:
    """Call in the transaction that ended `run` with `status`. The DAG's count after it (None:
    the status leaves it alone, or a success found it at 0 and nothing was written)."""
    failed = status == RunStatus.FAILED
    if not failed and status != RunStatus.SUCCESS:
        return None
    dag_id = run.dag_id
    with connection.cursor() as cursor:
        cursor.execute(_count_sql(), [failed, dag_id, failed])
        row = cursor.fetchone()
    if row is None:
        return None
    failures, threshold = row
    retry_failed = failed and run.trigger == Trigger.RUNBOOK
    if (
        failed
        and threshold is not None
        and (failures == threshold or (retry_failed and failures >= threshold))
    ):
        crossed = DagStreakCrossed(
            dag_id=dag_id, run_id=run.id, failures=failures, runbook_retry_failed=retry_failed
        )
        for listener in _listeners.values():
            listener(crossed)
    return failures
