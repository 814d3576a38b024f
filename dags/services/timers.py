"""Sleep and sensor nodes, ended from their rows (`DagTimer`, begun by `dags.engine.timers`).

The beat leader's housekeeping calls `sleeps_wake` every round: the due sleeps are taken in a
batch (`timers_claim`: one UPDATE over `SELECT ... FOR UPDATE SKIP LOCKED`, so two rounds,
or two beats that both believe they lead, never take one row twice) and each node is ended
as any finished node is (`node_complete`, with its run locked first, the engine's order),
in a short transaction of its own. A round that dies after taking its rows leaves them
leased for LEASE_SECONDS; the next round takes them again. The wake-up is at-least-once
from the rows and exactly once for the node: `timer_end` is a conditional UPDATE on the lease
the round holds, then `node_complete` on a node that must still be `sleeping`.

Sensors share the claim and the end (`dags.services.sensor_rounds` pokes them).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from dags.choices import NodeStatus, RunStatus, TimerKind, TimerStatus
from dags.engine.completion import node_complete
from dags.engine.state import run_lock
from dags.models import DagNodeState, DagRun, DagTimer

logger = logging.getLogger(__name__)

LEASE_SECONDS = 60.0
ACTIVE_NODE_STATUS = {TimerKind.SLEEP: NodeStatus.SLEEPING, TimerKind.SENSOR: NodeStatus.SENSING}

# Ranked per tenant first (window functions and FOR UPDATE do not mix in one SELECT), then
# locked; READ COMMITTED re-checks the WHERE of a row another round changed meanwhile.
_CLAIM_SQL = """
WITH ranked AS (
    SELECT id, row_number() OVER (PARTITION BY tenant_id ORDER BY due_at, id) AS place
    FROM dags_dagtimer
    WHERE status = 'waiting' AND kind = %(kind)s AND due_at <= %(now)s
      AND (lease_until IS NULL OR lease_until <= %(now)s)
), picked AS (
    SELECT id FROM dags_dagtimer
    WHERE id IN (SELECT id FROM ranked WHERE place <= %(per_tenant)s)
      AND status = 'waiting' AND (lease_until IS NULL OR lease_until <= %(now)s)
    ORDER BY due_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE dags_dagtimer AS timer SET lease_until = %(lease)s
FROM picked WHERE timer.id = picked.id
RETURNING timer.id
"""


@dataclass(frozen=True)
class Claimed:
    timers: list[DagTimer]
    lease: datetime  # the token of this round's hold on them


def timers_claim(*, kind: str, now: datetime, limit: int, per_tenant: int) -> Claimed:
    """Take up to `limit` due rows of `kind` (at most `per_tenant` of one tenant), leased
    for LEASE_SECONDS past `now` plus whatever the caller adds by its own clock."""
    lease = now + timedelta(seconds=LEASE_SECONDS)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            _CLAIM_SQL,
            {"kind": kind, "now": now, "per_tenant": per_tenant, "limit": limit, "lease": lease},
        )
        ids = [row[0] for row in cursor.fetchall()]
    timers = list(DagTimer.platform.filter(id__in=ids).order_by("due_at", "id")) if ids else []
    return Claimed(timers=timers, lease=lease)


def timer_release(*, timer: DagTimer, lease: datetime) -> None:
    """A claimed row this round did not get to: the next round takes it."""
    DagTimer.platform.filter(id=timer.id, status=TimerStatus.WAITING, lease_until=lease).update(
        lease_until=None
    )


def timer_end(
    *,
    timer: DagTimer,
    lease: datetime,
    now: datetime,
    timer_status: str,
    node_status: str,
    result: Any = None,
    error: str = "",
    changes: dict[str, Any] | None = None,
) -> bool:
    """End the row and its node (run locked first). False when this round's lease is gone or
    the node no longer waits (its run was cancelled or failed meanwhile: the row is marked
    cancelled)."""
    with transaction.atomic():
        try:
            run = run_lock(timer.run_id)
        except DagRun.DoesNotExist:
            return False
        waiting = DagNodeState.objects.filter(
            run=run, node_id=timer.node_id, status=ACTIVE_NODE_STATUS[timer.kind]
        ).exists()
        mine = DagTimer.platform.filter(id=timer.id, status=TimerStatus.WAITING, lease_until=lease)
        if run.status != RunStatus.RUNNING or not waiting:
            mine.update(status=TimerStatus.CANCELLED, resolved_at=now, lease_until=None)
            return False
        fields = {"last_error": error[:4000], **(changes or {})}
        ended = mine.update(status=timer_status, resolved_at=now, lease_until=None, **fields)
        if ended != 1:
            return False
        node_complete(
            run=run, node_id=timer.node_id, status=node_status, result=result, error=error
        )
        return True


def sleeps_wake(*, now: datetime | None = None, limit: int = 500) -> int:
    """End the sleeps that are due (one housekeeping round); how many woke."""
    now = now or timezone.now()
    claimed = timers_claim(kind=TimerKind.SLEEP, now=now, limit=limit, per_tenant=limit)
    woke = 0
    for timer in claimed.timers:
        try:
            woke += timer_end(
                timer=timer,
                lease=claimed.lease,
                now=now,
                timer_status=TimerStatus.FIRED,
                node_status=NodeStatus.SUCCESS,
                result={"due_at": timer.due_at.isoformat(), "woke_at": now.isoformat()},
            )
        except Exception:  # one broken run must not keep the others asleep
            logger.exception("could not wake sleep %s of run %s", timer.node_id, timer.run_id)
    return woke
