"""What a DAG schedule's fire does: start a DAG run, under the DAG's overlap policy.

The beat's schedule engine (`beat.engine`) fires DAGs from the same heap as
tasks: it decides *when* (catch-up, jitter, start/end window, change feed, shards, the
leader lock) and hands the chosen fire instants here. UNIQUE(dag, scheduled_at) on
scheduled runs (`uniq_dag_scheduled_fire`) makes a fire happen once even when two
schedulers both think they lead: the second insert is a no-op (`dag_trigger` returns None).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from dags.choices import ACTIVE_RUN_STATUSES, Overlap, RunStatus
from dags.engine.readiness import run_stop
from dags.engine.state import run_lock
from dags.models import Dag, DagRun
from dags.services.runs import dag_trigger
from scheduler_app.services.remaining_runs import PAUSED_BY, exhausted_note

logger = logging.getLogger(__name__)


def _fire(dag: Dag, scheduled_at: datetime) -> bool:
    """One fire under the DAG's overlap policy; True when it created a run.

    The policies mean what they mean for a task, over DAG runs instead of executions:
    `skip` records nothing while a run is active; `buffer_one` keeps one run `queued` until
    the active ones end (more fires are skipped); `cancel_other` ends the active runs
    (a DAG run is the scheduler's to cancel: its nodes stop through the run's abort)."""
    recorded = DagRun.platform.filter(
        dag=dag, scheduled_at=scheduled_at, trigger__in=("schedule", "backfill")
    )
    if recorded.exists():
        # Another leader (or a backfill) has this fire: its run must not be judged an
        # overlap of itself (`cancel_other` would end it); the unique constraint covers a
        # race past this check.
        return False
    active = DagRun.platform.filter(dag=dag, status__in=ACTIVE_RUN_STATUSES)
    queue_only = False
    if dag.overlap == Overlap.SKIP and active.exists():
        logger.info("DAG %s: fire at %s skipped, a run is still active", dag.name, scheduled_at)
        return False
    if dag.overlap == Overlap.BUFFER_ONE and active.exists():
        if active.filter(status=RunStatus.QUEUED).exists():
            return False
        queue_only = True
    if dag.overlap == Overlap.CANCEL_OTHER:
        for run_id in list(active.values_list("id", flat=True)):
            run = run_lock(run_id)
            if run.status in ACTIVE_RUN_STATUSES:
                run_stop(run=run, status=RunStatus.CANCELLED, reason="a newer fire replaced it")
    run = dag_trigger(dag=dag, trigger="schedule", scheduled_at=scheduled_at, queue_only=queue_only)
    return run is not None


def _remaining_spend(dag_id: uuid.UUID, *, left: int, scheduled_at: datetime) -> None:
    """A run was recorded for a DAG with `policy.remaining_runs` (`left` before it, read
    under the row lock): one off the count, and at 0 the DAG pauses with its record and no
    next fire (in the fire's transaction)."""
    dag = Dag.platform.filter(id=dag_id)
    if left > 1:
        dag.update(remaining_runs=left - 1)
        return
    now = timezone.now()
    dag.update(
        remaining_runs=0,
        paused=True,
        next_fire_at=None,
        paused_at=now,
        paused_by=PAUSED_BY,
        pause_note=exhausted_note(scheduled_at),
        changed_at=now,
        updated_at=now,
    )


def _fire_within_remaining(dag: Dag, scheduled_at: datetime) -> bool:
    """`_fire`, counted against `policy.remaining_runs`. A limited DAG's row is locked first,
    so two schedulers firing it read the count one after the other; a fire that the other
    one recorded creates no run and spends nothing. A DAG without a limit (as read at the
    batch's start) fires as it always did, with no lock."""
    if dag.remaining_runs is None:
        return _fire(dag, scheduled_at)
    remaining = (
        Dag.platform.select_for_update()
        .filter(id=dag.id)
        .values_list("remaining_runs", "paused")
        .first()
    )
    if remaining is None or remaining[1] or remaining[0] == 0:
        return False
    created = _fire(dag, scheduled_at)
    if created and remaining[0] is not None:
        _remaining_spend(dag.id, left=remaining[0], scheduled_at=scheduled_at)
    return created


def dag_schedule_fires_record(fires: Sequence[tuple[uuid.UUID, datetime]]) -> int:
    """Start a run per (dag id, scheduled_at), in order; returns how many runs were created.

    A fire another scheduler recorded already creates nothing. A DAG deleted, paused or
    disabled since the engine last read it does not fire (the change feed drops it next).
    One DAG's failing fire is logged and rolled back alone: it must not stop the others,
    nor the tasks' fires."""
    if not fires:
        return 0
    dags = Dag.platform.in_bulk({dag_id for dag_id, _ in fires})
    created = 0
    for dag_id, scheduled_at in fires:
        dag = dags.get(dag_id)
        if dag is None or dag.deleted_at is not None or dag.paused or not dag.enabled:
            continue
        try:
            with transaction.atomic():
                created += _fire_within_remaining(dag, scheduled_at)
        except Exception:
            logger.exception("DAG %s: fire at %s failed", dag.name, scheduled_at)
    return created


def dag_next_fires_save(updates: Sequence[tuple[uuid.UUID, datetime | None, datetime]]) -> None:
    """Persist where each fired DAG's schedule now stands (dag id, next fire, last fired).
    Not a change: `changed_at` stays, so the change feed does not re-read the DAG."""
    if not updates:
        return
    # A DAG paused meanwhile (its remaining runs spent) keeps no next fire.
    paused = set(
        Dag.platform.filter(id__in=[dag_id for dag_id, _, _ in updates], paused=True).values_list(
            "id", flat=True
        )
    )
    Dag.platform.bulk_update(
        [
            Dag(id=dag_id, next_fire_at=None if dag_id in paused else nxt, last_fired_at=last)
            for dag_id, nxt, last in updates
        ],
        ["next_fire_at", "last_fired_at"],
    )
