"""What the admin API knows about the beat schedulers: their Redis status, and failover."""

from __future__ import annotations

import json
import time
from typing import Any

import redis
from django.conf import settings

from scheduler_app.errors import Conflict
from scheduler_app.redis_client import get_redis, redis_key

# How long a node asked to yield stays out of the election (in lock TTLs).
YIELD_TTLS = 3


def scheduler_status() -> dict[str, Any]:
    """Leader (node, epoch, since), every reporting node with its lag, and the standbys."""
    client = get_redis()
    now = time.time()
    holder = client.get(redis_key("scheduler:leader"))
    info = client.hgetall(redis_key("scheduler:leader-info")) if holder else {}
    nodes: list[dict[str, Any]] = []
    for key in client.scan_iter(match=redis_key("scheduler:node:*"), count=100):
        raw = client.get(key)
        if not raw:
            continue
        try:
            node = json.loads(raw)
        except ValueError:
            continue
        node["lag_seconds"] = round(max(0.0, now - float(node.get("reported_at", now))), 3)
        nodes.append(node)
    nodes.sort(key=lambda node: node.get("node", ""))
    leader_node = info.get("node") if info else None
    leader = None
    if leader_node:
        reported = next((node for node in nodes if node.get("node") == leader_node), None)
        leader = {
            "node": leader_node,
            "epoch": int(info.get("epoch", 0)),
            "since": float(info.get("since", 0)),
            "lag_seconds": reported["lag_seconds"] if reported else None,
        }
    return {
        "leader": leader,
        "standbys": [node["node"] for node in nodes if node.get("node") != leader_node],
        "nodes": nodes,
        "lock_ttl_seconds": settings.SCHEDULER["LOCK_TTL_SECONDS"],
    }


def scheduler_failover() -> dict[str, Any]:
    """Ask the current leader to release its lock; a standby takes over on its next tick."""
    status = scheduler_status()
    leader = status["leader"]
    if leader is None:
        raise Conflict("no scheduler holds the leader lock right now")
    ttl = settings.SCHEDULER["LOCK_TTL_SECONDS"]
    try:
        get_redis().set(
            redis_key(f"scheduler:yield:{leader['node']}"),
            str(time.time()),
            ex=max(1, int(ttl * YIELD_TTLS)),
        )
    except redis.RedisError as error:
        raise Conflict(f"could not reach Redis: {error}") from error
    return {"previous_leader": leader["node"], "previous_epoch": leader["epoch"], "requested": True}
