"""What the admin API knows about the beat schedulers: their Redis status, and failover.

With SCHEDULER_SHARDS=N every shard has its own lock, epoch and standbys (beat.shards): the
status lists each shard's leader and standbys, and a failover names the shard it moves.
Shard 0 (the unsharded keys, and the fleet-wide duties) stays the top-level `leader`.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis
from django.conf import settings

from scheduler_app.errors import Conflict, ValidationFailed
from scheduler_app.redis_client import get_redis, redis_key
from scheduler_app.shard_keys import (
    beat_of_node,
    live_beats,
    roster_key,
    roster_ttl,
    shard_key_prefix,
)

# How long a node asked to yield stays out of the election (in lock TTLs).
YIELD_TTLS = 3


def _shard_count() -> int:
    return max(1, int(settings.SCHEDULER["SHARDS"]))


def _shard_key(index: int, name: str) -> str:
    return f"{shard_key_prefix(settings.SCHEDULER['REDIS_KEY_PREFIX'], index)}{name}"


def _nodes(client: redis.Redis, now: float) -> list[dict[str, Any]]:
    """What every beat engine last reported (beat.status), with how old the report is."""
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
    return nodes


def _leaders(client: redis.Redis, shards: int) -> list[dict[str, str]]:
    """Each shard's leader-info hash, or {} when nobody holds its lock."""
    pipe = client.pipeline(transaction=False)
    for index in range(shards):
        pipe.get(_shard_key(index, "scheduler:leader"))
        pipe.hgetall(_shard_key(index, "scheduler:leader-info"))
    replies = pipe.execute()
    return [replies[2 * index + 1] if replies[2 * index] else {} for index in range(shards)]


def _shard_of_node(node: str, shards: int) -> int:
    if shards == 1:
        return 0
    _, _, index = node.rpartition("/shard-")
    return int(index) if index.isascii() and index.isdigit() else -1


def _beats(client: redis.Redis, now: float) -> list[dict[str, Any]]:
    """The sharded beats' roster: each live beat and how many shards it leads."""
    raw = client.hgetall(roster_key(settings.SCHEDULER["REDIS_KEY_PREFIX"]))
    live = live_beats(raw, now=now, ttl=roster_ttl(settings.SCHEDULER["LOCK_TTL_SECONDS"]))
    return [{"beat": beat, "leads": leads} for beat, leads in sorted(live.items())]


def scheduler_status() -> dict[str, Any]:
    """Every shard's leader (node, beat, epoch, since, lag) and standbys, every reporting
    node, and (sharded) the live beats; `leader` and `standbys` at the top are shard 0's."""
    client = get_redis()
    now = time.time()
    shards = _shard_count()
    nodes = _nodes(client, now)
    by_shard: list[dict[str, Any]] = []
    for index, info in enumerate(_leaders(client, shards)):
        leader_node = info.get("node") if info else None
        leader = None
        if leader_node:
            reported = next((node for node in nodes if node.get("node") == leader_node), None)
            leader = {
                "node": leader_node,
                "beat": beat_of_node(leader_node),
                "epoch": int(info.get("epoch", 0)),
                "since": float(info.get("since", 0)),
                "lag_seconds": reported["lag_seconds"] if reported else None,
            }
        standbys = [
            node["node"]
            for node in nodes
            if node.get("node") != leader_node
            and _shard_of_node(node.get("node", ""), shards) == index
        ]
        by_shard.append({"shard": index, "leader": leader, "standbys": standbys})
    return {
        "leader": by_shard[0]["leader"],
        "standbys": by_shard[0]["standbys"],
        "shards": by_shard,
        "beats": _beats(client, now) if shards > 1 else [],
        "nodes": nodes,
        "lock_ttl_seconds": settings.SCHEDULER["LOCK_TTL_SECONDS"],
    }


def _refuse_a_failover_nobody_can_take(status: dict[str, Any], shard: int) -> None:
    """Sharded, a beat takes a free shard only while it leads fewer than its fair share
    (beat.shards): when every other live beat is at it, the shard would have no leader until
    its yield ran out and the same beat took it back. Refuse rather than cause that gap."""
    leader = status["shards"][shard]["leader"]
    beats = status["beats"]
    fair = -(-len(status["shards"]) // max(1, len(beats)))
    if not any(b["beat"] != leader["beat"] and b["leads"] < fair for b in beats):
        raise Conflict(
            f"no other live beat has room for shard {shard} (each leads its fair share of"
            f" {fair}): it would stay leaderless until {leader['node']} took it back; run"
            " another beat first"
        )


def scheduler_failover(*, shard: int = 0) -> dict[str, Any]:
    """Ask the leader of `shard` to release its lock; a standby takes over on its next tick."""
    shards = _shard_count()
    if not 0 <= shard < shards:
        raise ValidationFailed(f"shard must be from 0 to {shards - 1}", field="shard")
    status = scheduler_status()
    leader = status["shards"][shard]["leader"]
    if leader is None:
        raise Conflict(f"no scheduler holds the leader lock of shard {shard} right now")
    if shards > 1:
        _refuse_a_failover_nobody_can_take(status, shard)
    ttl = settings.SCHEDULER["LOCK_TTL_SECONDS"]
    try:
        get_redis().set(
            _shard_key(shard, f"scheduler:yield:{leader['node']}"),
            str(time.time()),
            ex=max(1, int(ttl * YIELD_TTLS)),
        )
    except redis.RedisError as error:
        raise Conflict(f"could not reach Redis: {error}") from error
    return {
        "shard": shard,
        "previous_leader": leader["node"],
        "previous_epoch": leader["epoch"],
        "requested": True,
    }
