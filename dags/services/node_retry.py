"""The `retry` failure policy: a failed node is tried again before its failure counts.

A node retries when the DAG's `failure_policy` is `retry` or the node's own is. Its policy is
the node's `retry_policy`, else the DAG's, over the task's own (max_attempts, backoff,
base_delay_seconds, max_delay_seconds). Its executions are dispatched with the policy's
`max_attempts`, so a failure the worker retries by itself (a transient error) is spaced by the
task's backoff as usual; a failure the worker would not retry (a permanent error, a timeout
with no attempt left under the task's own rules) is retried here, in the transaction that
ended it, as the next attempt of the same chain: a `pending` row at now + the policy's delay
(no broker delay; the beat publishes it when due, invariant 4). Only when the attempts are
spent does the node fail and the DAG's policy apply (`retry` itself then goes on as
`skip_downstream`).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.utils import timezone

from dags.choices import ACTIVE_NODE_STATUSES, FailurePolicy, NodeStatus
from dags.graph import Graph
from dags.models import DagNodeState, DagRun
from scheduler_app.choices import RETRYABLE_STATUSES, ExecutionStatus
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.services.backoff import RetryPolicy, retry_delay_seconds
from scheduler_app.services.follow_ups import execution_follow_up_create


def node_retries(graph: Graph, node_id: str) -> bool:
    node = graph.nodes[node_id]
    if "map_over" in node:
        return False
    return FailurePolicy.RETRY in (graph.failure_policy, node.get("failure_policy"))


def _policy_overrides(graph: Graph, node_id: str) -> dict[str, Any]:
    return {**graph.retry_policy, **(graph.nodes[node_id].get("retry_policy") or {})}


def node_max_attempts(graph: Graph, node_id: str, *, task_max_attempts: int) -> int:
    """How many attempts a node's execution chain gets when it is dispatched."""
    if not node_retries(graph, node_id):
        return task_max_attempts
    return int(_policy_overrides(graph, node_id).get("max_attempts", task_max_attempts))


def _retry_policy(graph: Graph, node_id: str, task: TaskDefinition) -> RetryPolicy:
    overrides = _policy_overrides(graph, node_id)
    return RetryPolicy(
        max_attempts=int(overrides.get("max_attempts", task.max_attempts)),
        backoff=overrides.get("backoff", task.backoff),
        base_delay_seconds=float(overrides.get("base_delay_seconds", task.base_delay_seconds)),
        max_delay_seconds=float(overrides.get("max_delay_seconds", task.max_delay_seconds)),
    )


def node_retry(
    *, run: DagRun, graph: Graph, node_id: str, status: str, execution_id: uuid.UUID | None
) -> bool:
    """Schedule the next attempt of a node whose chain just ended `status`, if the policy
    allows it; True when it did (the node is `pending` again and nothing was counted).
    The run row is locked by the caller."""
    if execution_id is None or status not in RETRYABLE_STATUSES or not node_retries(graph, node_id):
        return False
    last = TaskExecution.objects.filter(root_execution_id=execution_id).order_by("-attempt").first()
    if last is None or last.status not in RETRYABLE_STATUSES or last.attempt >= last.max_attempts:
        return False
    now = timezone.now()
    policy = _retry_policy(graph, node_id, TaskDefinition.objects.get(id=last.task_id))
    delay = retry_delay_seconds(policy, failed_attempt=last.attempt)
    # The worker dead-lettered this attempt (it would not retry it); the DAG's policy does.
    TaskExecution.objects.filter(id=last.id, scheduled_at=last.scheduled_at).update(
        dead_lettered=False, dead_lettered_at=None
    )
    execution_follow_up_create(
        previous=last,
        status=ExecutionStatus.PENDING,
        scheduled_at=now + timedelta(seconds=delay),
        attempt=last.attempt + 1,
        max_attempts=last.max_attempts,
    )
    DagNodeState.objects.filter(
        run=run, node_id=node_id, status__in=ACTIVE_NODE_STATUSES, execution_id=execution_id
    ).update(status=NodeStatus.PENDING, attempts=last.attempt + 1, updated_at=now)
    return True
