"""The start of an approval node's wait, when the node becomes ready (`readiness.nodes_ready`,
the run's lock held): an ApprovalWait row for the node's current attempt, the node in
`waiting_for_approval` (no execution, no worker slot), and the listeners told.

Alerting announces the wait (with a signed link per approver) and sits above the DAG engine:
it registers a listener here in its AppConfig.ready and enqueues the announcement once the
transaction commits, as it does for failure streaks (`failure_streaks`). The decisions and
the timeout are `dags.services.approvals`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from django.utils import timezone

from dags.approval_models import ApprovalWait
from dags.choices import ApprovalWaitStatus, NodeStatus
from dags.models import DagNodeState, DagRun

ApprovalWaitListener = Callable[[ApprovalWait], None]

_listeners: dict[str, ApprovalWaitListener] = {}


def approval_wait_listener_register(name: str, listener: ApprovalWaitListener) -> None:
    _listeners[name] = listener


def approval_wait_begin(*, run: DagRun, node_id: str, spec: Mapping[str, Any]) -> ApprovalWait:
    now = timezone.now()
    state = DagNodeState.objects.get(run=run, node_id=node_id)
    wait, _ = ApprovalWait.platform.update_or_create(
        run=run,
        node_id=node_id,
        attempt_number=state.attempt_number,
        defaults={
            "tenant_id": run.tenant_id,
            "role": spec["role"] or "",
            "usernames": list(spec["users"]),
            "required": spec["count"],
            "on_timeout": spec["on_timeout"],
            "message": spec["message"],
            "started_at": now,
            "deadline": now + timedelta(seconds=spec["timeout_seconds"]),
            "status": ApprovalWaitStatus.WAITING,
            "resolved_at": None,
        },
    )
    DagNodeState.objects.filter(id=state.id, status=NodeStatus.WAITING).update(
        status=NodeStatus.WAITING_FOR_APPROVAL, started_at=now, updated_at=now
    )
    for listener in _listeners.values():
        listener(wait)
    return wait
