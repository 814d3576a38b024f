"""A node's earlier attempts in its run: kept, not overwritten, when the node runs again.

A re-run (of the run from its failed nodes, or of one node whose dead letter was retried)
resets the node's state for its next attempt and drops its execution links (the engine's
links are the current attempt's only). Before that, in the same transaction and under the
run's lock, what the attempt showed is written once as a DagNodeAttempt: its outcome and
times, what started it and who, and its links move to DagNodeAttemptExecution, so its
executions (a chain, or a fan-out's shards) are still named by their DAG, run and node.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from dags.choices import NodeStatus
from dags.models import (
    DagNodeAttempt,
    DagNodeAttemptExecution,
    DagNodeExecution,
    DagNodeState,
    DagRun,
)


def node_attempts_keep(
    *, run: DagRun, states: Iterable[DagNodeState], now: datetime
) -> dict[str, int]:
    """Keep the current attempt of each of `states` (read under the run's lock) that had an
    outcome; node id -> the number its next attempt takes. A node still `waiting` never
    started that attempt: it keeps its number and nothing is written."""
    states = list(states)
    kept = [state for state in states if state.status != NodeStatus.WAITING]
    attempts = DagNodeAttempt.objects.bulk_create(
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
                result=state.result,
                error_message=state.error_message,
                started_at=state.started_at,
                completed_at=state.completed_at,
                superseded_at=now,
            )
            for state in kept
        ]
    )
    attempt_of = {attempt.node_id: attempt for attempt in attempts}
    if attempt_of:
        links = DagNodeExecution.objects.filter(run=run, node_id__in=list(attempt_of))
        DagNodeAttemptExecution.objects.bulk_create(
            [
                DagNodeAttemptExecution(
                    execution_root_id=link.execution_root_id,
                    attempt=attempt_of[link.node_id],
                    run=run,
                    node_id=link.node_id,
                    shard_index=link.shard_index,
                )
                for link in links
            ],
            ignore_conflicts=True,  # a chain belongs to one attempt; never moved twice
        )
    return {state.node_id: state.attempt_number + (state.node_id in attempt_of) for state in states}
