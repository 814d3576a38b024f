"""Fan-out (`map_over`) and chord fan-in.

A mapped node's shards are ordinary executions, rung as the header of a Celery chord
whose body (`dags.join_map`) joins the shard results, ordered by item, into the node's
result. Each shard retries on its own; since a retry is not part of the chord, a shard
chain that ends on a retry does the join itself. If a chord callback is lost (Redis
restarted), `map_joins_reconcile` completes the join from the shards' rows in PostgreSQL.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from dags.choices import NodeStatus, RunStatus
from dags.models import DagNodeExecution, DagNodeState, DagRun
from dags.services.engine import lock_run, node_complete
from scheduler_app.choices import Trigger

logger = logging.getLogger(__name__)

MAP_SHARD_TASK = "dags.run_map_shard"
MAP_JOIN_TASK = "dags.join_map"


def send_map_chord(*, execution_ids: list[str], run_id: str, node_id: str, queue: str) -> None:
    from celery import chord

    from project.celery import app

    header = [
        app.signature(MAP_SHARD_TASK, args=[execution_id], queue=queue, immutable=True)
        for execution_id in execution_ids
    ]
    body = app.signature(MAP_JOIN_TASK, args=[run_id, node_id], queue=queue, immutable=True)
    chord(header, app=app)(body)


def shard_settled(*, run: DagRun, link, execution) -> None:
    """A shard chain reached its final outcome (run row locked by the caller)."""
    updated = DagNodeExecution.objects.filter(
        execution_root_id=link.execution_root_id, status=""
    ).update(status=execution.status, result=execution.result)
    if updated != 1:
        return
    DagNodeState.objects.filter(run=run, node_id=link.node_id, status=NodeStatus.RUNNING).update(
        map_finished=F("map_finished") + 1, updated_at=timezone.now()
    )
    if execution.trigger != Trigger.DAG:
        # A retry is outside the chord: the chord may have fired already, so join here.
        map_join(run=run, node_id=link.node_id)


def map_join(*, run: DagRun, node_id: str) -> bool:
    """Join the shards into the node's result once all have ended. Idempotent."""
    if run.status != RunStatus.RUNNING:
        return False
    state = DagNodeState.objects.filter(
        run=run, node_id=node_id, status=NodeStatus.RUNNING, map_total__isnull=False
    ).first()
    if state is None or state.map_finished < state.map_total:
        return False
    shards = list(
        DagNodeExecution.objects.filter(run=run, node_id=node_id)
        .order_by("shard_index")
        .values_list("status", "result")
    )
    failed = sum(1 for status, _ in shards if status != NodeStatus.SUCCESS)
    result = {"results": [result for _, result in shards], "failed": failed}
    node_complete(
        run=run,
        node_id=node_id,
        status=NodeStatus.FAILED if failed else NodeStatus.SUCCESS,
        result=result,
        error=f"{failed} of {len(shards)} shards failed" if failed else "",
    )
    return True


def map_join_by_id(*, run_id: str | uuid.UUID, node_id: str) -> bool:
    with transaction.atomic():
        return map_join(run=lock_run(uuid.UUID(str(run_id))), node_id=node_id)


def map_joins_reconcile(*, grace_seconds: float = 5.0, limit: int = 200) -> int:
    """Joins whose chord callback never came: every shard ended a while ago, node still open."""
    cutoff = timezone.now() - timedelta(seconds=grace_seconds)
    stuck = DagNodeState.objects.filter(
        status=NodeStatus.RUNNING,
        map_total__isnull=False,
        map_finished__gte=F("map_total"),
        updated_at__lt=cutoff,
    ).values_list("run_id", "node_id")[:limit]
    joined = 0
    for run_id, node_id in list(stuck):
        if map_join_by_id(run_id=run_id, node_id=node_id):
            logger.warning("joined map node %s of run %s (chord callback lost)", node_id, run_id)
            joined += 1
    return joined
