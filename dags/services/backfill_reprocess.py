"""What a backfill does with a fire time that already has a run: its reprocess policy.

`none` leaves every recorded fire alone (a fire happens once); `failed` runs again the fires
whose recorded run ended failed, timed out or cancelled (dead-lettered ones included; for a
DAG: failed, partially completed, cancelled); `all` runs again every recorded fire that has
ended, succeeded ones too. A fire whose run is still waiting or running is never touched:
there would be two of it at once.

Running a recorded fire again never duplicates it:
- a task's fire gets a new execution at the same `scheduled_at`, numbered after the highest
  attempt recorded there (UNIQUE(task, scheduled_at, attempt) holds, and the beat's insert of
  that fire, attempt 1, still conflicts: the scheduler never takes it for a new fire). It is a
  chain of its own (its retries count from it) with the task's full retry budget
  (`max_attempts` = its attempt - 1 + the task's max_attempts, as a dead letter's retry gets
  the full budget), trigger `backfill`, `retry_of` the run it repeats; a dead-lettered run
  it repeats leaves the dead-letter queue. The run it repeats is locked and checked for a
  follow-up (a retry, a dead letter's retry, another backfill's re-run) first, and the
  unique key is the backstop: of two backfills racing for the same fire one runs it again,
  the other finds it running.
- a DAG's fire keeps its one run (UNIQUE(dag, scheduled_at)): `failed` re-runs its failed
  nodes inside it (`dag_run_rerun`), `all` clears every node (`dag_run_clear_all`).

The same classification answers the dry run and the release, so what the dry run says is
what the backfill does (unless a run changes state in between).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from dags.choices import ACTIVE_RUN_STATUSES, BackfillReprocess, FireOutcome, RunStatus
from dags.models import Dag, DagRun
from dags.services.node_actions import dag_run_clear_all
from dags.services.runs import RERUNNABLE, dag_run_rerun
from scheduler_app.choices import ACTIVE_STATUSES, ExecutionStatus, Trigger
from scheduler_app.errors import Conflict, ValidationFailed
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.services.follow_ups import execution_follow_up_build

# A task run that did not succeed, for `failed` (a skipped fire did not fail: it was left out).
FAILED_TASK_STATUSES = (
    ExecutionStatus.FAILED,
    ExecutionStatus.TIMED_OUT,
    ExecutionStatus.CANCELLED,
)


def reprocess_validated(value: object) -> str:
    if value is None:
        return BackfillReprocess.NONE
    if not isinstance(value, str) or value not in BackfillReprocess.values:
        raise ValidationFailed(
            "reprocess must be one of " + ", ".join(BackfillReprocess.values), field="reprocess"
        )
    return value


@dataclass(frozen=True, slots=True)
class FirePlan:
    """One fire time's outcome; `was`: the status of its recorded run (None: no run);
    `previous`: that run (a DAG run), `previous_id` its id (for a task: the fire's last
    execution, loaded only when it is run again); `attempt`:
    for a task, the attempt a run again of it takes (one after the highest recorded at the
    fire time when it was planned: a second re-run from the same look conflicts)."""

    outcome: str
    was: str | None = None
    previous: DagRun | None = None
    previous_id: uuid.UUID | None = None
    attempt: int = 1


_NEW = FirePlan(FireOutcome.NEW)


def _decide(policy: str, status: str, *, active: bool, failed: bool, succeeded: bool) -> str:
    if policy == BackfillReprocess.NONE:
        return FireOutcome.SKIPPED_RECORDED
    if active:
        return FireOutcome.SKIPPED_RUNNING
    if policy == BackfillReprocess.ALL or failed:
        return FireOutcome.RERUN
    return FireOutcome.SKIPPED_SUCCEEDED if succeeded else FireOutcome.SKIPPED_RECORDED


def task_fire_plans(
    *, task: TaskDefinition, fires: Iterable[datetime], policy: str
) -> dict[datetime, FirePlan]:
    """Each fire's outcome. A fire's recorded run is the last chain started at its
    `scheduled_at` (the highest attempt there), and its state that chain's last execution
    (a retry, or a dead letter's retry, continues the chain at another time)."""
    wanted = list(fires)
    if not wanted:
        return {}
    starts: dict[datetime, tuple[int, uuid.UUID]] = {}
    asked = set(wanted)
    # The range, not a list of up to 10,000 instants: one index range scan.
    in_range = TaskExecution.platform.filter(
        task=task, scheduled_at__gte=min(wanted), scheduled_at__lte=max(wanted)
    )
    rows = in_range.values_list("scheduled_at", "attempt", "root_execution_id", "id")
    for at, attempt, root, execution_id in rows:
        if at not in asked:
            continue
        if at not in starts or attempt > starts[at][0]:
            starts[at] = (attempt, root or execution_id)
    if not starts:
        return dict.fromkeys(wanted, _NEW)
    # The chains started in the range, as a subquery (no list of 10,000 ids to send): a few
    # more than the fires' (runs at other instants of the range) is harmless.
    roots = in_range.annotate(chain=Coalesce("root_execution_id", "id")).values("chain")
    # A row written without a root (an older row, a test's) is the root of its own chain.
    last = {
        chain: (execution_id, status, dead_lettered)
        # Every member of a chain is due at or after its start (retries and a dead letter's
        # retry come later): the bound keeps the scan on the task's rows of the range onward.
        for chain, execution_id, status, dead_lettered in TaskExecution.platform.filter(
            Q(root_execution_id__in=roots) | Q(id__in=roots),
            task=task,
            scheduled_at__gte=min(starts),
        )
        .annotate(chain=Coalesce("root_execution_id", "id"))
        .order_by("chain", "-created_at", "-attempt")
        .distinct("chain")
        .values_list("chain", "id", "status", "dead_lettered")
    }
    plans: dict[datetime, FirePlan] = {}
    for at in wanted:
        if at not in starts:
            plans[at] = _NEW
            continue
        found = last.get(starts[at][1])
        if found is None:  # a chain whose root row is gone (retention): a record all the same
            plans[at] = FirePlan(FireOutcome.SKIPPED_RECORDED)
            continue
        execution_id, status, dead_lettered = found
        outcome = _decide(
            policy,
            status,
            active=status in ACTIVE_STATUSES,
            failed=status in FAILED_TASK_STATUSES or dead_lettered,
            succeeded=status == ExecutionStatus.SUCCESS,
        )
        plans[at] = FirePlan(
            outcome, was=status, previous_id=execution_id, attempt=starts[at][0] + 1
        )
    return plans


def dag_fire_plans(*, dag: Dag, fires: Iterable[datetime], policy: str) -> dict[datetime, FirePlan]:
    """Each fire's outcome: its DAG run (one per fire time) and the state it is in."""
    wanted = list(fires)
    if not wanted:
        return {}
    # The range, not a list of up to 10,000 instants; runs at other instants are not asked.
    recorded = DagRun.platform.filter(
        dag=dag, scheduled_at__gte=min(wanted), scheduled_at__lte=max(wanted)
    )
    runs = {run.scheduled_at: run for run in recorded}
    plans: dict[datetime, FirePlan] = {}
    for at in wanted:
        run = runs.get(at)
        if run is None:
            plans[at] = _NEW
            continue
        status = str(run.status)
        outcome = _decide(
            policy,
            status,
            active=status in ACTIVE_RUN_STATUSES,
            failed=status in RERUNNABLE,
            succeeded=status == RunStatus.SUCCESS,
        )
        plans[at] = FirePlan(outcome, was=status, previous=run, previous_id=run.id)
    return plans


def task_fires_run_again(
    *, task: TaskDefinition, plans: dict[datetime, FirePlan]
) -> dict[datetime, uuid.UUID]:
    """Insert a new run of each fire planned RERUN (pending, due at its fire time, so the
    leader publishes it as every due pending row), at the attempt its plan names, with ON
    CONFLICT DO NOTHING: of two re-runs planned from the same look (two backfills at once)
    one is inserted, never a duplicate-key error; returns the ones inserted. The caller
    holds the backfill's lock and counts these against its max_parallel."""
    chosen = {at: plan for at, plan in plans.items() if plan.outcome == FireOutcome.RERUN}
    if not chosen:
        return {}
    previous_of, chosen = _not_followed_up(task, chosen)
    rows = []
    for at, plan in chosen.items():
        previous = previous_of[plan.previous_id]
        attempt = plan.attempt
        rows.append(
            execution_follow_up_build(
                previous=previous,
                status=ExecutionStatus.PENDING,
                scheduled_at=at,
                attempt=attempt,
                max_attempts=attempt - 1 + task.max_attempts,
                priority=task.priority,
                trigger=Trigger.BACKFILL,
                own_chain=True,
            )
        )
    TaskExecution.objects.bulk_create(rows, ignore_conflicts=True)
    inserted = set(
        TaskExecution.platform.filter(
            id__in=[row.id for row in rows], scheduled_at__in=list(chosen)
        ).values_list("id", flat=True)
    )
    repeated = [row.retry_of_id for row in rows if row.id in inserted]
    TaskExecution.platform.filter(id__in=repeated, dead_lettered=True).update(
        dead_lettered=False, updated_at=timezone.now()
    )
    return {row.scheduled_at: row.id for row in rows if row.id in inserted}


def _not_followed_up(
    task: TaskDefinition, chosen: dict[datetime, FirePlan]
) -> tuple[dict[uuid.UUID, TaskExecution], dict[datetime, FirePlan]]:
    """The runs the plans repeat, locked, and the planned re-runs whose run nobody followed
    up since the plan looked: locked first, so a dead letter's retry (its conditional UPDATE
    of the same row) and a re-run from another backfill wait, and then find this one's
    follow-up."""
    previous_ids = [plan.previous_id for plan in chosen.values() if plan.previous_id]
    previous_of = {
        row.id: row
        for row in TaskExecution.platform.select_for_update().filter(task=task, id__in=previous_ids)
    }
    followed = set(
        TaskExecution.platform.filter(
            task=task,
            # A follow-up is due no earlier than the fire it follows (see task_fire_plans).
            scheduled_at__gte=min(chosen),
            retry_of_id__in=previous_ids,
            trigger__in=(Trigger.RETRY, Trigger.BACKFILL),
        ).values_list("retry_of_id", flat=True)
    )
    return previous_of, {
        at: plan
        for at, plan in chosen.items()
        if plan.previous_id in previous_of and plan.previous_id not in followed
    }


def dag_fires_run_again(
    *, plans: dict[datetime, FirePlan], policy: str, backfill_id: uuid.UUID
) -> dict[datetime, uuid.UUID]:
    """Run again in place each DAG run planned RERUN: `failed` re-runs its failed nodes,
    `all` clears every node. A run that started meanwhile (another backfill, an operator)
    is left to it (its Conflict is the answer)."""
    started: dict[datetime, uuid.UUID] = {}
    actor = f"backfill:{backfill_id}"
    for at, plan in plans.items():
        if plan.outcome != FireOutcome.RERUN:
            continue
        run = plan.previous
        assert isinstance(run, DagRun)
        try:
            if policy == BackfillReprocess.FAILED:
                dag_run_rerun(run=run, triggered_by=actor)
            else:
                dag_run_clear_all(run=run, actor=actor, note="backfill: reprocess all")
        except Conflict:
            continue
        started[at] = run.id
    return started
