"""System-wide state read at request time: broker queue depth, scheduler nodes, readiness.

Not tenant data: these feed /metrics, /readyz and the operators' part of the dashboard.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime

import redis
from django.conf import settings
from django.db import connection
from django.db.models import Count, Min, Q
from django.utils import timezone

from scheduler_app.choices import TIERS, ExecutionStatus
from scheduler_app.models import TaskExecution
from scheduler_app.redis_client import get_redis, redis_from_url, redis_key

logger = logging.getLogger(__name__)

# kombu's Redis transport keeps one list per priority step: "name", "name\x06\x163", ...
PRIORITY_SEPARATOR = "\x06\x16"
PRIORITY_STEPS = (0, 3, 6, 9)

_broker_clients: dict[str, redis.Redis] = {}


def broker_redis() -> redis.Redis:
    url = settings.CELERY_BROKER_URL
    client = _broker_clients.get(url)
    if client is None:
        client = redis_from_url(
            url, decode_responses=True, socket_timeout=5, socket_connect_timeout=5
        )
        _broker_clients[url] = client
    return client


def _queue_keys(queue: str) -> list[str]:
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "") or ""
    return [
        f"{prefix}{queue}" if step == 0 else f"{prefix}{queue}{PRIORITY_SEPARATOR}{step}"
        for step in PRIORITY_STEPS
    ]


def _message_execution_id(raw: str) -> str | None:
    """The doorbell's execution id: the first positional argument of the Celery message, or
    the first id of a batch's list (`dispatch.batch_message`)."""
    try:
        message = json.loads(raw)
        body = json.loads(base64.b64decode(message["body"]))
        first = body[0][0]
        if isinstance(first, list):
            first = first[0]
        return str(uuid.UUID(str(first)))
    except (ValueError, KeyError, IndexError, TypeError):
        return None


@dataclass(frozen=True)
class QueueState:
    tier: str
    depth: int
    oldest_age_seconds: float | None


def queue_states(*, now: datetime | None = None) -> list[QueueState]:
    """LLEN of each tier's lists; the oldest message (the tail: LPUSH in, BRPOP out) gives the
    execution whose queued time dates the queue."""
    now = now or timezone.now()
    client = broker_redis()
    states = []
    for tier in TIERS:
        keys = _queue_keys(tier)
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.llen(key)
            pipe.lindex(key, -1)
        replies = pipe.execute()
        depth = sum(int(replies[i]) for i in range(0, len(replies), 2))
        oldest: datetime | None = None
        for raw in replies[1::2]:
            execution_id = _message_execution_id(raw) if raw else None
            if execution_id is None:
                continue
            row = (
                TaskExecution.platform.filter(id=execution_id)
                .values_list("queued_at", "scheduled_at")
                .first()
            )
            if row is not None:
                stamp = row[0] or row[1]
                oldest = stamp if oldest is None else min(oldest, stamp)
        age = (now - oldest).total_seconds() if oldest is not None else None
        states.append(QueueState(tier=tier, depth=depth, oldest_age_seconds=age))
    return states


@dataclass(frozen=True)
class WaitingRuns:
    count: int
    oldest_scheduled_at: datetime | None


def waiting_runs(*, now: datetime | None = None) -> dict[str, WaitingRuns]:
    """Runs waiting for a worker, per tier, read from PostgreSQL (the record): queued rows and
    pending rows already due. Unlike the broker's list length this counts runs, not messages
    (a doorbell rings several runs of one tenant, SCHEDULER_DOORBELL_BATCH), and a run whose
    doorbell was lost is still counted. The autoscaling signal: admin/queues recommends on
    it, and KEDA scales the worker tiers on it (scheduler_runs_waiting, deploy/kubernetes).
    One grouped query over the partial index on active states."""
    now = now or timezone.now()
    waiting = Q(status=ExecutionStatus.QUEUED) | Q(
        status=ExecutionStatus.PENDING, scheduled_at__lte=now
    )
    rows = {
        row["queue"]: WaitingRuns(count=row["count"], oldest_scheduled_at=row["oldest"])
        for row in TaskExecution.platform.filter(waiting)
        .values("queue")
        .annotate(count=Count("id"), oldest=Min("scheduled_at"))
    }
    return {tier: rows.get(tier, WaitingRuns(count=0, oldest_scheduled_at=None)) for tier in TIERS}


@dataclass(frozen=True)
class SchedulerNode:
    node: str
    role: str
    epoch: int | None
    schedules: int
    fired_total: int
    published_total: int
    reported_age_seconds: float


def scheduler_nodes() -> list[SchedulerNode]:
    """What each beat instance last wrote (beat.status; keys expire after 30 s)."""
    client = get_redis()
    keys = sorted(client.scan_iter(match=redis_key("scheduler:node:*"), count=500))
    nodes = []
    for raw in client.mget(keys) if keys else []:
        if not raw:
            continue
        status = json.loads(raw)
        nodes.append(
            SchedulerNode(
                node=status["node"],
                role=status["role"],
                epoch=status.get("epoch"),
                schedules=int(status.get("schedules", 0)),
                fired_total=int(status.get("fired_total", 0)),
                published_total=int(status.get("published_total", 0)),
                reported_age_seconds=max(0.0, time.time() - float(status["reported_at"])),
            )
        )
    return nodes


def leader_node(nodes: list[SchedulerNode] | None = None) -> SchedulerNode | None:
    fresh_within = settings.MONITORING["LEADER_FRESH_SECONDS"]
    for node in nodes if nodes is not None else scheduler_nodes():
        if node.role == "leader" and node.reported_age_seconds <= fresh_within:
            return node
    return None


def readiness() -> dict[str, str]:
    """One line per dependency of this process: "ok" or why not. Ready when every line is
    "ok". The scheduler's health is not one of them (`scheduler_health`): an orchestrator
    must not take the API out of service because no beat leads."""
    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as error:  # any driver error means not ready
        checks["database"] = f"error: {type(error).__name__}"
    try:
        get_redis().ping()
        checks["redis"] = "ok"
    except redis.RedisError as error:
        checks["redis"] = f"error: {type(error).__name__}"
    return checks


def scheduler_health() -> dict[str, str]:
    """Whether a scheduler leads (reported within MONITORING_LEADER_FRESH_SECONDS)."""
    try:
        leader = leader_node()
    except redis.RedisError as error:
        return {"leader": f"unknown: redis unreachable ({type(error).__name__})"}
    return {"leader": "ok" if leader else "error: no scheduler has reported as leader"}
