"""DAG schedules, fired by the beat leader through one hook (`dag_schedules_fire`).

Same semantics as task schedules: cron/interval/once from `scheduler_app.schedules`,
missed fires inside the catch-up window handled by `catchup` (none | latest | all),
a fire while a run is active handled by `overlap` (allow | skip | buffer_one |
cancel_other), and UNIQUE(dag, scheduled_at) for scheduled runs so a fire happens once
even if two schedulers both think they lead.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from dags.choices import ACTIVE_RUN_STATUSES, Catchup, Overlap, RunStatus
from dags.models import Dag, DagRun
from dags.services.links import run_lock
from dags.services.readiness import run_stop
from dags.services.runs import dag_trigger
from scheduler_app.schedules import ScheduleError
from scheduler_app.task_schedule import schedule_for

logger = logging.getLogger(__name__)

MAX_CATCHUP_FIRES = 1000
# A fire this late still counts as on time for catchup='none' (a tick is ~0.5 s).
ON_TIME_GRACE = timedelta(seconds=5)


def _owed_fires(dag: Dag, schedule, *, now: datetime, window: timedelta) -> list[datetime]:
    fires: list[datetime] = []
    fire_at = dag.next_fire_at
    while fire_at is not None and fire_at <= now and len(fires) < MAX_CATCHUP_FIRES:
        if fire_at >= now - window:
            fires.append(fire_at)
        fire_at = schedule.next_after(fire_at)
    if dag.catchup == Catchup.ALL:
        return fires
    if dag.catchup == Catchup.LATEST:
        return fires[-1:]
    return [f for f in fires if f >= now - ON_TIME_GRACE][-1:]


def _fire(dag: Dag, scheduled_at: datetime) -> None:
    active = DagRun.objects.filter(dag=dag, status__in=ACTIVE_RUN_STATUSES)
    queue_only = False
    if dag.overlap == Overlap.SKIP and active.exists():
        logger.info("DAG %s: fire at %s skipped, a run is still active", dag.name, scheduled_at)
        return
    if dag.overlap == Overlap.BUFFER_ONE and active.exists():
        if active.filter(status=RunStatus.QUEUED).exists():
            return
        queue_only = True
    if dag.overlap == Overlap.CANCEL_OTHER:
        for run_id in list(active.values_list("id", flat=True)):
            with transaction.atomic():
                run = run_lock(run_id)
                if run.status in ACTIVE_RUN_STATUSES:
                    run_stop(run=run, status=RunStatus.CANCELLED, reason="a newer fire replaced it")
    dag_trigger(dag=dag, trigger="schedule", scheduled_at=scheduled_at, queue_only=queue_only)


def dag_schedules_fire(
    *, now: datetime | None = None, catchup_window_seconds: float = 300, limit: int = 500
) -> int:
    """Fire every DAG whose next fire is due; returns how many runs were created."""
    now = now or timezone.now()
    window = timedelta(seconds=catchup_window_seconds)
    due = Dag.objects.filter(
        next_fire_at__lte=now, enabled=True, paused=False, deleted_at__isnull=True
    ).order_by("next_fire_at")[:limit]
    fired = 0
    for dag in due:
        try:
            schedule = schedule_for(
                schedule_type=dag.schedule_type,
                expression=dag.schedule_expression,
                timezone=dag.timezone,
                run_at=dag.run_at,
                anchor=dag.created_at,
            )
        except ScheduleError:
            logger.exception("DAG %s has an invalid schedule; not firing it", dag.id)
            Dag.objects.filter(id=dag.id).update(next_fire_at=None)
            continue
        fires = _owed_fires(dag, schedule, now=now, window=window)
        # Claim the fires first (compare-and-swap on next_fire_at): a second scheduler
        # that read the same row moves on, and the unique constraint covers the rest.
        claimed = Dag.objects.filter(id=dag.id, next_fire_at=dag.next_fire_at).update(
            next_fire_at=schedule.next_after(now),
            last_fired_at=fires[-1] if fires else dag.last_fired_at,
        )
        if claimed != 1:
            continue
        for scheduled_at in fires:
            try:
                _fire(dag, scheduled_at)
                fired += 1
            except Exception:
                logger.exception("DAG %s: fire at %s failed", dag.name, scheduled_at)
    return fired


def dag_beat_tick(*, catchup_window_seconds: float) -> None:
    """The beat leader's one hook into the DAG engine, once per tick. A DAG problem is
    logged, never raised: it must not stop the tasks' scheduling."""
    try:
        dag_schedules_fire(catchup_window_seconds=catchup_window_seconds)
    except Exception:
        logger.exception("firing DAG schedules failed")


def dag_beat_housekeeping() -> None:
    """The beat leader's housekeeping hook: complete joins whose chord callback was lost."""
    from dags.services.mapping import map_joins_reconcile

    try:
        map_joins_reconcile()
    except Exception:
        logger.exception("reconciling DAG fan-out joins failed")
