"""Which shard a task is in, and the Redis names of shards and of the beat roster.

Pure functions, shared by the beat (beat.shards, which runs the shards) and the admin
services (services.scheduler_control, which reports on them and moves them).
"""

from __future__ import annotations

import json
import uuid


def shard_of(task_id: uuid.UUID, shards: int) -> int:
    return int(task_id.hex[:8], 16) % shards


def shard_sql(column: str, shards: int) -> str:
    """`shard_of` in PostgreSQL, for a uuid column."""
    return (
        f"mod(('x' || lpad(substr(replace({column}::text, '-', ''), 1, 8), 16, '0'))"
        f"::bit(64)::bigint, {int(shards)})"
    )


def shard_key_prefix(key_prefix: str, index: int) -> str:
    """Shard 0 keeps the unsharded keys (readiness reads them)."""
    return key_prefix if index == 0 else f"{key_prefix}shard-{index}:"


def shard_node_id(beat: str, index: int, shards: int) -> str:
    """The node id of a beat's engine for one shard (the beat's own id when unsharded)."""
    return beat if shards == 1 else f"{beat}/shard-{index}"


def beat_of_node(node_id: str) -> str:
    """The beat process a node id belongs to (`shard_node_id` reversed)."""
    return node_id.rsplit("/shard-", 1)[0]


def roster_ttl(lock_ttl: float) -> float:
    """A beat silent in the roster for this long no longer counts in the fair share."""
    return 3 * lock_ttl + 2


def roster_key(key_prefix: str) -> str:
    return f"{key_prefix}scheduler:beats"


def live_beats(raw: dict[str, str], *, now: float, ttl: float) -> dict[str, int]:
    """The roster hash's live beats and how many shards each leads."""
    live = {}
    for node, value in raw.items():
        entry = json.loads(value)
        if now - entry["at"] <= ttl:
            live[node] = int(entry["leads"])
    return live
