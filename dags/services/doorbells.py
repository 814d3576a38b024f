"""How dispatched DAG nodes reach a worker, inside the transaction that made them ready.

* Their executions and links (node -> execution) are written and their state rows become
  `queued` in one statement, however many there are (on PostgreSQL two INSERTs and an
  UPDATE fed by arrays, in one round trip; a 500-wide fan-out is not 500 CASE branches).
* One of them may be handed on to the worker that finished the upstream node, which runs
  it right after the commit (see `dags.services.hand_on`): no doorbell for that one.
* The others ring their doorbells after commit, in one `ring` (a wide wave in batch
  doorbells, `scheduler_app.ringing.publish.batch_size`). Each carries a sticky hint naming the
  worker whose node made it ready, so ringing (`scheduler_app.ringing.sticky.route`)
  sends it to that worker's own queue while the worker has free slots (its inputs and
  caches are warm there), else to the tier queue.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from functools import cache

from django.conf import settings
from django.db import transaction

from dags.choices import NodeStatus
from dags.models import DagNodeExecution, DagNodeState, DagRun
from dags.services.hand_on import HandOn
from dags.services.links import NodeLink, link_remember
from scheduler_app import db_rows
from scheduler_app.choices import ExecutionStatus, Trigger
from scheduler_app.models import TaskExecution
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.publish import batch_size
from scheduler_app.ringing.ring import ring
from scheduler_app.ringing.sticky import sticky_hints_set

logger = logging.getLogger(__name__)


def node_executions_write(
    *, run: DagRun, states: Sequence[DagNodeState], executions: Sequence[TaskExecution], now
) -> None:
    """Write a dispatch wave: each state's new execution (`state.execution_id`, in the order
    of `executions`), its link to the node, and the state made queued: one statement however
    many nodes the wave has (arrays bound on the server: for a 500-wide fan-out the ORM's bulk
    insert and a VALUES list cost more in Python than in the database, and the wave's workers
    wait for this transaction)."""
    encoder = TaskExecution._meta.get_field("parameters").encoder
    params: list[object] = [
        Trigger.DAG.value,
        ExecutionStatus.QUEUED.value,
        now,
        [e.id for e in executions],
        [e.task_id for e in executions],
        [e.priority for e in executions],
        [e.queue for e in executions],
        [e.scheduled_at for e in executions],
        [e.max_attempts for e in executions],
        [
            None if e.parameters is None else json.dumps(e.parameters, cls=encoder)
            for e in executions
        ],
        [e.worker_id or "" for e in executions],
        run.tenant_id,
        [s.id for s in states],
        [s.node_id for s in states],
        run.id,
        NodeStatus.QUEUED.value,
        now,
        now,
    ]
    with db_rows.server_bound_cursor() as cursor:
        cursor.execute(_wave_sql(), params, prepare=db_rows.prepare_statements())


@cache
def _wave_sql() -> str:
    executions = TaskExecution._meta.db_table
    links = DagNodeExecution._meta.db_table
    states = DagNodeState._meta.db_table
    # Identifiers come from the models' metadata; every value is a bound parameter. The
    # columns are those the scheduler's own batch insert writes, and the parameters.
    return (
        "WITH fixed AS (SELECT %s::text AS trigger, %s::text AS status, "  # noqa: S608
        "%s::timestamptz AS now), "
        "e AS (SELECT * FROM unnest(%s::uuid[], %s::uuid[], %s::int[], %s::text[], "
        "%s::timestamptz[], %s::int[], %s::text[], %s::text[]) WITH ORDINALITY "
        "AS e(id, task_id, priority, queue, scheduled_at, max_attempts, parameters, worker_id, "
        "position)), "
        f"inserted AS (INSERT INTO {executions} (id, tenant_id, task_id, status, trigger, "
        "priority, queue, scheduled_at, queued_at, attempt, max_attempts, root_execution_id, "
        "parameters, worker_id, error_message, error_class, dead_lettered, created_at, "
        "updated_at) SELECT e.id, %s, e.task_id, fixed.status, fixed.trigger, e.priority, "
        "e.queue, e.scheduled_at, e.scheduled_at, 1, e.max_attempts, e.id, "
        "e.parameters::jsonb, e.worker_id, '', '', false, fixed.now, fixed.now "
        "FROM e, fixed), "
        "v AS (SELECT s.state_id, e.id AS execution_id, s.node_id "
        "FROM unnest(%s::bigint[], %s::text[]) WITH ORDINALITY AS s(state_id, node_id, position) "
        "JOIN e USING (position)), "
        f"linked AS (INSERT INTO {links} (execution_root_id, run_id, node_id, shard_index, "
        "status, result) SELECT v.execution_id, %s, v.node_id, NULL, '', NULL FROM v) "
        f"UPDATE {states} AS s SET status = %s, execution_id = v.execution_id, attempts = 1, "
        "started_at = %s, updated_at = %s FROM v WHERE s.id = v.state_id"
    )


def node_execution_keep(
    executions: Sequence[tuple[str, TaskExecution]],
    *,
    prefer_worker: str,
    hand_on: HandOn | None = None,
) -> tuple[str, TaskExecution] | None:
    """Before the rows are written: the (node id, execution) the worker finishing the
    upstream node will run itself, if any. Its row is written under that worker's id, so
    that if the worker dies before claiming it the dead-worker reaper rings it for the fleet
    (`worker_kept_runs_ring`) within seconds."""
    if hand_on is None:
        return None
    for node_id, execution in executions:
        if hand_on.offer(queue=execution.queue):
            execution.worker_id = prefer_worker
            return node_id, execution
    return None


def node_executions_ring(
    *,
    run: DagRun,
    executions: Sequence[tuple[str, TaskExecution]],
    kept: tuple[str, TaskExecution] | None,
    prefer_worker: str = "",
    hand_on: HandOn | None = None,
) -> None:
    """Ring the doorbells of new node executions after commit, but for the `kept` one
    (`node_execution_keep`), which is handed to this worker instead (`executions` are
    (node id, execution) pairs)."""
    if kept is not None and hand_on is not None:
        node_id, execution = kept
        _link_remember(run=run, node_id=node_id, execution_id=execution.id)
        hand_on.accept(str(execution.id))
    bells = [
        Doorbell(str(e.id), str(run.tenant_id), e.queue, task_id=str(e.task_id))
        for _, e in executions
        if kept is None or e is not kept[1]
    ]
    if not bells:
        return

    def ring_now() -> None:
        if prefer_worker:
            _sticky_hints_set(bells, worker_id=prefer_worker)
        ring(bells, batch=settings.SCHEDULER["DOORBELL_BATCH"])

    transaction.on_commit(ring_now)


def wave_batch(nodes: int) -> int:
    """Nodes per chord header member for a map of `nodes` shards: as for a wave's doorbells
    (`scheduler_app.ringing.publish.batch_size`)."""
    return batch_size(nodes, settings.SCHEDULER["DOORBELL_BATCH"])


def _sticky_hints_set(bells: Sequence[Doorbell], *, worker_id: str) -> None:
    try:
        sticky_hints_set(execution_ids=[bell.execution_id for bell in bells], worker_id=worker_id)
    except Exception:  # stickiness is an optimisation: the doorbells ring to their tier
        logger.exception("could not record sticky hints for %d DAG nodes", len(bells))


def _link_remember(*, run: DagRun, node_id: str, execution_id: uuid.UUID) -> None:
    """This process will run the execution: it need not read back the link it just wrote."""
    link_remember(
        NodeLink(
            run_id=run.id,
            version_id=run.version_id,
            node_id=node_id,
            shard_index=None,
            execution_root_id=execution_id,
        )
    )
