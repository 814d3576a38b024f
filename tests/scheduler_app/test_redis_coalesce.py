"""Folded counter writes leave Redis exactly as the same writes sent one by one would."""

from __future__ import annotations

import uuid

from scheduler_app.redis_coalesce import CoalescedWrites


def _writes(pipe, prefix: str) -> None:
    for run in range(5):
        pipe.incr(f"{prefix}:active")
        pipe.decr(f"{prefix}:active")
        pipe.incr(f"{prefix}:done")
        pipe.expire(f"{prefix}:done", 120)
        pipe.hincrby(f"{prefix}:runs", f"t|normal|{'success' if run % 2 else 'failed'}", 1)
        pipe.hincrbyfloat(f"{prefix}:duration", "normal|sum", 0.25)
        pipe.incrbyfloat(f"{prefix}:seconds", 1.5)
        pipe.expire(f"{prefix}:seconds", 3600)
        pipe.zrem(f"{prefix}:inflight", f"e{run}")
        pipe.xadd(f"{prefix}:log", {"line": f"line {run}"})
    pipe.xadd(f"{prefix}:log", {"end": "success"})
    pipe.expire(f"{prefix}:log", 600)


def _state(client, prefix: str) -> dict:
    return {
        "active": client.get(f"{prefix}:active"),
        "done": client.get(f"{prefix}:done"),
        "runs": client.hgetall(f"{prefix}:runs"),
        "duration": client.hgetall(f"{prefix}:duration"),
        "seconds": float(client.get(f"{prefix}:seconds")),
        "inflight": client.zrange(f"{prefix}:inflight", 0, -1),
        "log": [fields for _, fields in client.xrange(f"{prefix}:log")],
        "ttls": [client.ttl(f"{prefix}:{key}") > 0 for key in ("done", "seconds", "log", "runs")],
    }


def test_coalesced_writes_match_the_same_writes_sent_one_by_one(redis_client):
    plain, folded = f"coalesce-test:{uuid.uuid4().hex}", f"coalesce-test:{uuid.uuid4().hex}"
    for prefix in (plain, folded):
        redis_client.zadd(f"{prefix}:inflight", {f"e{i}": i for i in range(8)})
    pipe = redis_client.pipeline(transaction=False)
    _writes(pipe, plain)
    sent_one_by_one = len(pipe)
    pipe.execute()
    writes = CoalescedWrites()
    _writes(writes, folded)
    pipe = redis_client.pipeline(transaction=False)
    writes.send_into(pipe)
    assert len(pipe) < sent_one_by_one / 3
    pipe.execute()
    try:
        assert _state(redis_client, folded) == _state(redis_client, plain)
        assert _state(redis_client, folded)["inflight"] == ["e5", "e6", "e7"]
    finally:
        redis_client.delete(*redis_client.keys("coalesce-test:*"))
