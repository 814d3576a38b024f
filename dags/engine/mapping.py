"""Mapping: a fan-out's shards, their chord and its join.

Fan-out (`map_over`): the chord's fan-in.

A mapped node's shards are ordinary executions, rung as the header of a Celery chord (a
wide map's header members carry several shards each; sent by
`dags.engine.dispatch.map_chord_send`) whose body (`dags.join_map`) joins
the shard results, ordered by item, into the node's result. Each shard retries on its own;
since a retry is not part of the chord, a shard chain that ends on a retry does the join
itself. If a chord callback is lost (Redis restarted), `map_joins_reconcile` completes the
join from the shards' rows in PostgreSQL.
"""

from __future__ import annotations

import json
import logging
import uuid
from datetime import timedelta
from functools import cache

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from dags.choices import NodeStatus, RunStatus
from dags.engine.completion import node_complete
from dags.engine.dispatch import HandOn
from dags.engine.state import run_lock
from dags.models import DagNodeExecution, DagNodeState, DagRun
from scheduler_app import db_rows
from scheduler_app.choices import Trigger

logger = logging.getLogger(__name__)


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


def chord_shard_settled(*, link, execution) -> None:
    """A chord member's shard chain ended on its first attempt: record its outcome and
    count it in one statement. No run lock: the chord's join does the rest (under the run
    lock), and this holds only the mapped node's state row until commit, so 500 shards
    finishing at once queue on one short row lock instead of the run's."""
    result = execution.result
    params = [
        str(execution.status),
        None if result is None else json.dumps(result),
        link.execution_root_id,
        timezone.now(),
        link.run_id,
        link.node_id,
        NodeStatus.RUNNING.value,
    ]
    with db_rows.server_bound_cursor() as cursor:
        cursor.execute(_chord_shard_sql(), params, prepare=True)


@cache
def _chord_shard_sql() -> str:
    links = DagNodeExecution._meta.db_table
    states = DagNodeState._meta.db_table
    # Identifiers come from the models' metadata; every value is a bound parameter.
    return (
        f"WITH shard AS (UPDATE {links} SET status = %s, result = %s::jsonb "  # noqa: S608
        "WHERE execution_root_id = %s AND status = '' RETURNING run_id) "
        f"UPDATE {states} SET map_finished = map_finished + 1, updated_at = %s "
        "WHERE run_id = %s AND node_id = %s AND status = %s AND EXISTS (SELECT 1 FROM shard)"
    )


def map_join(*, run: DagRun, node_id: str, hand_on: HandOn | None = None) -> bool:
    """Join the shards into the node's result once all have ended. Idempotent. `hand_on`:
    what the worker running the join may be handed (`dags.engine.dispatch`)."""
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
        hand_on=hand_on,
    )
    return True


def map_join_by_id(*, run_id: str | uuid.UUID, node_id: str, hand_on: HandOn | None = None) -> bool:
    with transaction.atomic():
        return map_join(run=run_lock(uuid.UUID(str(run_id))), node_id=node_id, hand_on=hand_on)


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
