"""A node's earlier attempts in its run: kept, not overwritten, when the node runs again.

A re-run (of the run from its failed nodes, or of one node whose dead letter was retried)
resets the node's state for its next attempt. Before that, in the same transaction and under
the run's lock, what the attempt showed is written once as a DagNodeAttempt: its outcome and
times, what started it, and the execution chain (or the fan-out's shards) that ran it. The
executions themselves stay where they are; the run page and the API read their live state
through the root ids kept here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from dags.choices import NodeStatus
from dags.models import DagNodeAttempt, DagNodeExecution, DagNodeState, DagRun


def node_attempts_keep(
    *, run: DagRun, states: Iterable[DagNodeState], now: datetime
) -> dict[str, int]:
    """Keep the current attempt of each of `states` (read under the run's lock) that had an
    outcome; node id -> the number its next attempt takes. A node still `waiting` never
    started that attempt: it keeps its number and nothing is written."""
    states = list(states)
    kept = [state for state in states if state.status != NodeStatus.WAITING]
    shards: dict[str, list[list]] = defaultdict(list)
    if kept:
        links = DagNodeExecution.objects.filter(
            run=run, node_id__in=[state.node_id for state in kept], shard_index__isnull=False
        ).order_by("node_id", "shard_index")
        for link in links:
            shards[link.node_id].append([link.shard_index, str(link.execution_root_id)])
    DagNodeAttempt.objects.bulk_create(
        [
            DagNodeAttempt(
                run=run,
                node_id=state.node_id,
                number=state.attempt_number,
                trigger=state.attempt_trigger,
                triggered_by=state.attempt_triggered_by,
                status=state.status,
                execution_id=state.execution_id,
                execution_attempts=state.attempts,
                map_total=state.map_total,
                shard_executions=shards.get(state.node_id, []),
                result=state.result,
                error_message=state.error_message,
                started_at=state.started_at,
                completed_at=state.completed_at,
                superseded_at=now,
            )
            for state in kept
        ]
    )
    kept_ids = {state.node_id for state in kept}
    return {state.node_id: state.attempt_number + (state.node_id in kept_ids) for state in states}
