"""Backfills: one run per fire time of a task's or a DAG's schedule in [start, end).

A backfill does not create its runs at once: the beat leader's housekeeping releases them in
fire-time order, never more than `max_parallel` of them unfinished at a time
(`backfills_advance`). Each fire is recorded at most once, whoever records it: a task's run is
its first execution at that `scheduled_at` (UNIQUE(task, scheduled_at, attempt), inserted with
ON CONFLICT DO NOTHING), a DAG's a run at that `scheduled_at` (the same unique index as the
schedule's fires), so a fire the scheduler (or another backfill) already recorded is counted
as `already_recorded` and not run again, unless the backfill's reprocess policy (`failed`,
`all`) says to run it again (`dags.services.backfill_reprocess`): then it is released in the
same waves as the new runs, counted against the same `max_parallel`.

Backfills are tenant input like any fan-out: a tenant may have at most
BACKFILL_MAX_RUNNING_PER_TENANT running at once (one more is a 409, code `limit_reached`:
refused rather than queued, so the tenant learns at once and no hidden queue grows), and a
housekeeping round advances at most BACKFILL_ADVANCE_BATCH of them taken in turn across
tenants (`backfills_in_turn`): before, the 200 oldest advanced each round, and one tenant's
200 parked backfills held another's at 1/3 for over a minute.

A task's run is released as a `pending` execution due at its fire time, so the leader
publishes it the way it publishes every due pending row (fair per tenant, quotas at claim);
trigger `backfill`, which the schedule-to-start histogram leaves out (its lag is the age of
the fire, not the scheduler's). A DAG's run starts at once (or waits as `queued` for a
max_active_runs slot) with trigger `backfill`.

Lives with the DAG engine because it starts DAG runs; the DAG app already depends on the
task side, not the other way round.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import transaction
from django.db.models import F, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from dags.choices import (
    ACTIVE_RUN_STATUSES,
    BackfillReprocess,
    BackfillStatus,
    FireOutcome,
    RunStatus,
)
from dags.models import Backfill, BackfillRun, Dag, DagRun
from dags.services.backfill_reprocess import (
    FirePlan,
    dag_fire_plans,
    dag_fires_run_again,
    reprocess_validated,
    task_fire_plans,
    task_fires_run_again,
)
from dags.services.runs import dag_run_cancel, dag_trigger
from scheduler_app.capabilities import queue_for
from scheduler_app.choices import (
    ACTIVE_STATUSES,
    WAITING_STATUSES,
    ExecutionStatus,
    Trigger,
)
from scheduler_app.errors import Conflict, LimitReached, ValidationFailed
from scheduler_app.models import TaskDefinition, TaskExecution, Tenant
from scheduler_app.services.audit import audit_action, audit_cascade
from scheduler_app.services.fire_traces import fire_spans_start
from scheduler_app.task_schedule import schedule_of, schedule_of_task
from schedules import Schedule

MAX_FIRES = 10_000
MAX_PARALLEL = 100
_JUST_BEFORE = timedelta(microseconds=1)


def _schedule_of(*, task: TaskDefinition | None, dag: Dag | None) -> Schedule:
    if task is not None:
        return schedule_of_task(task)
    assert dag is not None
    # The fires the schedule engine makes (window and jitter included), so a backfilled
    # run of a fire time is that fire (UNIQUE(dag, scheduled_at)).
    return schedule_of(dag)


def _fires(schedule: Schedule, *, after: datetime, end: datetime, limit: int) -> list[datetime]:
    """Up to `limit` fire times strictly after `after` and before `end`, in order."""
    fires: list[datetime] = []
    moment = schedule.next_after(after)
    while moment is not None and moment < end and len(fires) < limit:
        fires.append(moment)
        moment = schedule.next_after(moment)
    return fires


def _validated_range(start: Any, end: Any, max_parallel: Any) -> tuple[datetime, datetime, int]:
    for name, value in (("start", start), ("end", end)):
        if not isinstance(value, datetime) or value.tzinfo is None:
            raise ValidationFailed(
                f"{name} must be an ISO 8601 date-time with an offset", field=name
            )
    if end <= start:
        raise ValidationFailed("end must be after start", field="end")
    if isinstance(max_parallel, bool) or not isinstance(max_parallel, int):
        raise ValidationFailed("max_parallel must be an integer", field="max_parallel")
    if not 1 <= max_parallel <= MAX_PARALLEL:
        raise ValidationFailed(
            f"max_parallel must be between 1 and {MAX_PARALLEL}", field="max_parallel"
        )
    return start, end, max_parallel


@dataclass(frozen=True, slots=True)
class BackfillPlan:
    """What a backfill of the range would do, without doing it (the dry run): its fire
    times (the first `shown` of them), how many there are, which of the shown ones are
    already recorded (by the scheduler or another backfill), what it would do with each
    shown one under the reprocess policy (`plans`), and how many fires of the whole range
    have each outcome (`counts`)."""

    start: datetime
    end: datetime
    max_parallel: int
    total: int
    fires: list[datetime]
    already_recorded: frozenset[datetime]
    reprocess: str = BackfillReprocess.NONE
    plans: dict[datetime, FirePlan] | None = None
    counts: dict[str, int] | None = None


def _checked_fires(
    *, task: TaskDefinition | None, dag: Dag | None, start: datetime, end: datetime
) -> list[datetime]:
    """Every fire time of the range (at most MAX_FIRES), or the refusal a create would meet."""
    target = task if task is not None else dag
    if target is None or target.deleted_at is not None:
        raise Conflict("a deleted task or DAG cannot be backfilled", field="id")
    if target.schedule_type == "manual":
        raise ValidationFailed("a manual schedule has no fire times to backfill", field="schedule")
    schedule = _schedule_of(task=task, dag=dag)
    fires = _fires(schedule, after=start - _JUST_BEFORE, end=end, limit=MAX_FIRES + 1)
    if len(fires) > MAX_FIRES:
        raise ValidationFailed(
            f"the range holds more than {MAX_FIRES} fire times; backfill it in parts",
            field="end",
        )
    if not fires:
        raise ValidationFailed("the schedule has no fire time in this range", field="start")
    return fires


def backfill_plan(
    *,
    task: TaskDefinition | None = None,
    dag: Dag | None = None,
    start: datetime,
    end: datetime,
    max_parallel: int = 1,
    reprocess: str = BackfillReprocess.NONE,
    shown: int = 50,
) -> BackfillPlan:
    """The dry run of `backfill_create` with the same arguments: the same checks and the
    same fire times, nothing written."""
    start, end, max_parallel = _validated_range(start, end, max_parallel)
    reprocess = reprocess_validated(reprocess)
    fires = _checked_fires(task=task, dag=dag, start=start, end=end)
    plans = _fire_plans(task=task, dag=dag, fires=fires, policy=reprocess)
    counts = dict.fromkeys(FireOutcome.values, 0)
    for plan in plans.values():
        counts[plan.outcome] += 1
    first = fires[:shown]
    return BackfillPlan(
        start=start,
        end=end,
        max_parallel=max_parallel,
        total=len(fires),
        fires=first,
        already_recorded=frozenset(at for at in first if plans[at].outcome != FireOutcome.NEW),
        reprocess=reprocess,
        plans={at: plans[at] for at in first},
        counts=counts,
    )


def _fire_plans(
    *, task: TaskDefinition | None, dag: Dag | None, fires: list[datetime], policy: str
) -> dict[datetime, FirePlan]:
    if task is not None:
        return task_fire_plans(task=task, fires=fires, policy=policy)
    assert dag is not None
    return dag_fire_plans(dag=dag, fires=fires, policy=policy)


def backfill_create(
    *,
    tenant: Tenant,
    task: TaskDefinition | None = None,
    dag: Dag | None = None,
    start: datetime,
    end: datetime,
    max_parallel: int = 1,
    reprocess: str = BackfillReprocess.NONE,
) -> Backfill:
    """A backfill of a task's or a DAG's schedule; its first runs are released at once.
    `reprocess`: what it does with a fire that already has a run (none / failed / all)."""
    start, end, max_parallel = _validated_range(start, end, max_parallel)
    reprocess = reprocess_validated(reprocess)
    total = len(_checked_fires(task=task, dag=dag, start=start, end=end))
    with transaction.atomic():
        _running_limit_check(tenant)
        backfill = Backfill.objects.create(
            tenant=tenant,
            task=task,
            dag=dag,
            start_at=start,
            end_at=end,
            max_parallel=max_parallel,
            reprocess=reprocess,
            total=total,
        )
        _advance(Backfill.platform.select_for_update().get(id=backfill.id), now=timezone.now())
        _audit(
            backfill,
            "backfill.create",
            after={
                "start": start.isoformat(),
                "end": end.isoformat(),
                "runs": total,
                "max_parallel": max_parallel,
                "reprocess": reprocess,
            },
        )
    backfill.refresh_from_db()
    return backfill


def _running_limit_check(tenant: Tenant) -> None:
    """Under the tenant row's lock, so two creates at once cannot both take the last slot."""
    Tenant.objects.select_for_update().filter(id=tenant.id).first()
    limit = settings.BACKFILL_MAX_RUNNING_PER_TENANT
    running = Backfill.objects.filter(tenant=tenant, status=BackfillStatus.RUNNING).count()
    if running >= limit:
        raise LimitReached(
            f"this tenant has {running} backfills running; at most {limit} may run at once "
            "(BACKFILL_MAX_RUNNING_PER_TENANT): wait for one to finish or cancel one",
            field="backfills",
        )


def backfills_in_turn(*, limit: int) -> list[uuid.UUID]:
    """Up to `limit` running backfills, in turn across tenants: every tenant's least recently
    advanced one first (the tenants among them least recently served first), then every
    tenant's second, and so on. However many one tenant has, another's waits at most one
    round while a round covers the tenants (and a few rounds when tenants outnumber it)."""
    ranked = Backfill.platform.filter(status=BackfillStatus.RUNNING).annotate(
        turn=Window(
            RowNumber(),
            partition_by=[F("tenant_id")],
            order_by=[F("advanced_at").asc(nulls_first=True), F("created_at").asc()],
        )
    )
    return list(
        ranked.order_by("turn", F("advanced_at").asc(nulls_first=True), "created_at").values_list(
            "id", flat=True
        )[:limit]
    )


def backfills_advance(*, now: datetime | None = None, limit: int | None = None) -> int:
    """Release the next runs of running backfills that have room, taken in turn across
    tenants (the beat leader's housekeeping). Each in a transaction of its own, its row
    locked (skipped if another leader has it). Returns how many runs were released."""
    now = now or timezone.now()
    limit = settings.BACKFILL_ADVANCE_BATCH if limit is None else limit
    released = 0
    for backfill_id in backfills_in_turn(limit=limit):
        with transaction.atomic():
            backfill = (
                Backfill.platform.select_for_update(skip_locked=True, of=("self",))
                .filter(id=backfill_id, status=BackfillStatus.RUNNING)
                .select_related("task", "dag")
                .first()
            )
            if backfill is None:
                continue
            released += _advance(backfill, now=now)
            Backfill.platform.filter(id=backfill.id).update(advanced_at=now)
    return released


def _active_runs(backfill: Backfill) -> int:
    run_ids = BackfillRun.objects.filter(backfill=backfill, run_id__isnull=False).values("run_id")
    if backfill.task_id is not None:
        # A fire is unfinished while any attempt of its chain is waiting or running.
        return (
            TaskExecution.platform.filter(root_execution_id__in=run_ids, status__in=ACTIVE_STATUSES)
            .values("root_execution_id")
            .distinct()
            .count()
        )
    return DagRun.platform.filter(id__in=run_ids, status__in=ACTIVE_RUN_STATUSES).count()


def _advance(backfill: Backfill, *, now: datetime) -> int:
    """The row is locked by the caller."""
    active = _active_runs(backfill)
    room = backfill.max_parallel - active
    fires: list[datetime] = []
    if room > 0 and backfill.released < backfill.total:
        after = backfill.cursor or backfill.start_at - _JUST_BEFORE
        schedule = _schedule_of(task=backfill.task, dag=backfill.dag)
        fires = _fires(
            schedule,
            after=after,
            end=backfill.end_at,
            limit=min(room, backfill.total - backfill.released),
        )
    outcomes, created = _release(backfill, fires, now=now)
    BackfillRun.objects.bulk_create(
        [
            BackfillRun(
                backfill=backfill, scheduled_at=at, run_id=created.get(at), outcome=outcomes[at]
            )
            for at in fires
        ]
    )
    changes: dict[str, Any] = {}
    if fires:
        again = sum(1 for at in fires if outcomes[at] == FireOutcome.RERUN)
        backfill.cursor = changes["cursor"] = fires[-1]
        backfill.released = changes["released"] = backfill.released + len(fires)
        backfill.already_recorded = changes["already_recorded"] = (
            backfill.already_recorded + len(fires) - len(created)
        )
        if again:
            backfill.reprocessed = changes["reprocessed"] = backfill.reprocessed + again
    # Every fire released (or the schedule has no more in the range) and none unfinished.
    out_of_fires = backfill.released >= backfill.total or (room > 0 and len(fires) < room)
    if out_of_fires and active == 0 and len(created) == 0:
        backfill.status = changes["status"] = BackfillStatus.COMPLETED
        backfill.completed_at = changes["completed_at"] = now
    if changes:
        Backfill.platform.filter(id=backfill.id).update(**changes)
    return len(created)


def _release(
    backfill: Backfill, fires: list[datetime], *, now: datetime
) -> tuple[dict[datetime, str], dict[datetime, uuid.UUID]]:
    """Release `fires`: a new run for each one without a run, the recorded ones the policy
    runs again run again; returns each fire's outcome and the runs started (new or again),
    which count against max_parallel alike. A fire recorded meanwhile (the unique key held)
    is skipped as recorded, one taken meanwhile by another re-run as still running."""
    if not fires:
        return {}, {}
    plans = _fire_plans(
        task=backfill.task, dag=backfill.dag, fires=fires, policy=backfill.reprocess
    )
    fresh = [at for at in fires if plans[at].outcome == FireOutcome.NEW]
    if backfill.task_id is not None:
        assert backfill.task is not None
        created = _release_task_runs(backfill, fresh, now=now)
        again = task_fires_run_again(task=backfill.task, plans=plans)
    else:
        created = _release_dag_runs(backfill, fresh)
        again = dag_fires_run_again(plans=plans, policy=backfill.reprocess, backfill_id=backfill.id)
    outcomes: dict[datetime, str] = {}
    for at in fires:
        outcome = plans[at].outcome
        if outcome == FireOutcome.NEW and at not in created:
            outcome = FireOutcome.SKIPPED_RECORDED
        elif outcome == FireOutcome.RERUN and at not in again:
            outcome = FireOutcome.SKIPPED_RUNNING
        outcomes[at] = outcome
    return outcomes, {**created, **again}


def _release_task_runs(
    backfill: Backfill, fires: list[datetime], *, now: datetime
) -> dict[datetime, uuid.UUID]:
    """Pending first executions at the fire times; a fire already recorded is left alone.
    Tracing on: each run's trace starts here, with a fire span as the schedule's fires have
    (the due time its fire time), its context in the row, so the promote that rings it and
    the worker that runs it continue that trace."""
    if not fires:
        return {}
    task = backfill.task
    assert task is not None
    execution_ids = [uuid.uuid4() for _ in fires]
    spans = fire_spans_start(
        [_BackfillFire(task.id, at) for at in fires],
        execution_ids=execution_ids,
        attributes={
            "scheduler.trigger": Trigger.BACKFILL.value,
            "scheduler.backfill.id": str(backfill.id),
        },
    )
    traceparents = spans.traceparents if spans else [""] * len(fires)
    rows = []
    for at, execution_id, traceparent in zip(fires, execution_ids, traceparents, strict=True):
        rows.append(
            TaskExecution(
                id=execution_id,
                tenant_id=task.tenant_id,
                task_id=task.id,
                status=ExecutionStatus.PENDING,
                trigger=Trigger.BACKFILL,
                priority=task.priority,
                queue=queue_for(priority=task.priority, capability=task.capability),
                scheduled_at=at,
                attempt=1,
                max_attempts=task.max_attempts,
                root_execution_id=execution_id,
                traceparent=traceparent,
            )
        )
    TaskExecution.objects.bulk_create(rows, ignore_conflicts=True)
    inserted = set(
        TaskExecution.platform.filter(
            id__in=[row.id for row in rows], scheduled_at__in=fires
        ).values_list("id", flat=True)
    )
    if spans:
        spans.end(recorded=inserted)
    return {row.scheduled_at: row.id for row in rows if row.id in inserted}


class _BackfillFire(NamedTuple):
    """What a fire span names of a backfill's fire (`fire_traces._Fire`)."""

    task_id: uuid.UUID
    scheduled_at: datetime


def _release_dag_runs(backfill: Backfill, fires: list[datetime]) -> dict[datetime, uuid.UUID]:
    dag = backfill.dag
    assert dag is not None
    created: dict[datetime, uuid.UUID] = {}
    for at in fires:
        run = dag_trigger(dag=dag, trigger="backfill", scheduled_at=at)
        if run is not None:
            created[at] = run.id
    return created


def backfill_cancel(*, backfill: Backfill, note: str = "") -> Backfill:
    """Stop releasing; the runs it released that have not started are cancelled, the ones
    already running finish. `note`: why (kept in the audit log)."""
    now = timezone.now()
    with transaction.atomic():
        locked = Backfill.platform.select_for_update().get(id=backfill.id)
        if locked.status != BackfillStatus.RUNNING:
            raise Conflict(f"the backfill is already {locked.status}", field="status")
        Backfill.platform.filter(id=locked.id).update(
            status=BackfillStatus.CANCELLED, completed_at=now
        )
        run_ids = BackfillRun.objects.filter(backfill=locked, run_id__isnull=False).values("run_id")
        if locked.task_id is not None:
            TaskExecution.platform.filter(
                root_execution_id__in=run_ids, status__in=WAITING_STATUSES
            ).update(
                status=ExecutionStatus.CANCELLED,
                completed_at=now,
                error_message="backfill cancelled",
                updated_at=now,
            )
        else:
            with audit_cascade():
                for run in DagRun.platform.filter(id__in=run_ids, status=RunStatus.QUEUED):
                    dag_run_cancel(run=run)
        change = {"before": {"status": "running"}, "after": {"status": "cancelled"}}
        _audit(locked, "backfill.cancel", reason=note, **change)
    backfill.refresh_from_db()
    return backfill


def _audit(backfill: Backfill, verb: str, **change: Any) -> None:
    target = {"task": str(backfill.task_id)} if backfill.task_id else {"dag": str(backfill.dag_id)}
    audit_action(
        tenant=backfill.tenant,
        verb=verb,
        object_type="backfill",
        object_id=backfill.id,
        detail=target,
        **change,
    )
