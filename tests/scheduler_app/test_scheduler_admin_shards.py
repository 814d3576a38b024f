"""Scheduler status and failover with SCHEDULER_SHARDS > 1: every shard, not only shard 0.

The shards' leaders hold real leader locks (beat.lock's scripts on the test Redis) and the
beats' roster is written by beat.shards' own BeatRoster, as beat processes would; only the
engines' status reports (plain JSON the engines publish) are written here.
"""

from __future__ import annotations

import json
import time

import pytest
from django.conf import settings as django_settings

from beat.lock import LeaderLock
from beat.shards import BeatRoster
from scheduler_app.redis_client import get_redis, redis_key
from scheduler_app.shard_keys import shard_key_prefix, shard_node_id
from tests.api_clients import staff_client
from tests.processes import wait_until

pytestmark = pytest.mark.django_db

# Short, so that the yielding leader lets go within seconds (its renewer checks each round).
LOCK_TTL = 5.0


@pytest.fixture
def sharded(settings):
    """SCHEDULER_SHARDS=`n` in this process; no scheduler state left from another test."""
    client = get_redis()
    locks: list[LeaderLock] = []

    def configure(n: int) -> list[LeaderLock]:
        settings.SCHEDULER = {**settings.SCHEDULER, "SHARDS": n, "LOCK_TTL_SECONDS": LOCK_TTL}
        return locks

    for key in client.scan_iter(match=redis_key("*scheduler:*")):
        client.delete(key)
    yield configure
    for lock in locks:
        lock.release()


def _lead(locks: list, beat: str, shard: int, shards: int) -> LeaderLock:
    lock = LeaderLock(
        get_redis(),
        key_prefix=shard_key_prefix(django_settings.SCHEDULER["REDIS_KEY_PREFIX"], shard),
        node_id=shard_node_id(beat, shard, shards),
        ttl_seconds=LOCK_TTL,
    )
    assert lock.try_acquire()
    locks.append(lock)
    return lock


def _report(beat: str, shards: int) -> None:
    """Each engine of `beat` reports itself (what beat.status publishes every tick)."""
    for shard in range(shards):
        node = shard_node_id(beat, shard, shards)
        get_redis().set(
            redis_key(f"scheduler:node:{node}"),
            json.dumps({"node": node, "role": "standby", "reported_at": time.time()}),
            ex=30,
        )


def _roster(**leads: int) -> None:
    for beat, count in leads.items():
        BeatRoster(
            get_redis(),
            key_prefix=django_settings.SCHEDULER["REDIS_KEY_PREFIX"],
            node_id=beat,
            ttl=3 * LOCK_TTL + 2,
        ).report(count)


def test_status_shows_every_shards_leader_and_standbys(sharded):
    locks = sharded(3)
    _lead(locks, "alpha", 0, 3)
    beta = _lead(locks, "beta", 1, 3)
    for beat in ("alpha", "beta"):
        _report(beat, 3)
    _roster(alpha=1, beta=1)

    body = staff_client().get("/api/v1/admin/scheduler/status").json()

    assert [s["shard"] for s in body["shards"]] == [0, 1, 2]
    zero, one, two = body["shards"]
    assert zero["leader"]["node"] == "alpha/shard-0" and zero["leader"]["beat"] == "alpha"
    assert zero["standbys"] == ["beta/shard-0"]
    assert one["leader"]["node"] == "beta/shard-1" and one["leader"]["beat"] == "beta"
    assert one["leader"]["epoch"] == beta.epoch
    assert one["standbys"] == ["alpha/shard-1"]
    assert two["leader"] is None  # nobody leads shard 2: it shows, not hidden
    assert two["standbys"] == ["alpha/shard-2", "beta/shard-2"]
    # The top level stays shard 0's (the fleet duties' leader), as unsharded.
    assert body["leader"] == zero["leader"] and body["standbys"] == zero["standbys"]
    assert body["beats"] == [{"beat": "alpha", "leads": 1}, {"beat": "beta", "leads": 1}]


def test_failover_moves_the_named_shard_and_leaves_the_others(sharded):
    locks = sharded(3)
    alpha = _lead(locks, "alpha", 0, 3)
    beta = _lead(locks, "beta", 1, 3)
    _roster(alpha=1, beta=1, gamma=0)  # gamma leads nothing: room for shard 1
    staff = staff_client()

    answer = staff.post("/api/v1/admin/scheduler/failover?shard=1")

    assert answer.status_code == 202, answer.content
    assert answer.json() == {
        "shard": 1,
        "previous_leader": "beta/shard-1",
        "previous_epoch": beta.epoch,
        "requested": True,
    }
    # The real lock of shard 1's leader lets go (its renewer sees the request) and will not
    # take the shard back meanwhile; shard 0's leader is not asked anything.
    wait_until(lambda: not beta.is_held(), timeout=LOCK_TTL, message="shard 1's leader yields")
    assert not beta.try_acquire()
    assert alpha.is_held()
    status = staff.get("/api/v1/admin/scheduler/status").json()
    assert status["shards"][1]["leader"] is None
    assert status["shards"][0]["leader"]["node"] == "alpha/shard-0"


def test_failover_is_refused_when_no_other_beat_has_room_for_the_shard(sharded):
    """Two beats leading one of two shards each: the other beat is at its fair share and
    would not take the shard, which would go leaderless until its leader took it back."""
    locks = sharded(2)
    _lead(locks, "alpha", 0, 2)
    beta = _lead(locks, "beta", 1, 2)
    _roster(alpha=1, beta=1)

    answer = staff_client().post("/api/v1/admin/scheduler/failover?shard=1")

    assert answer.status_code == 409, answer.content
    assert "fair share" in answer.json()["message"]
    assert beta.is_held()
    yield_key = f"{shard_key_prefix(django_settings.SCHEDULER['REDIS_KEY_PREFIX'], 1)}"
    assert not get_redis().exists(f"{yield_key}scheduler:yield:beta/shard-1")


@pytest.mark.parametrize(
    ("query", "code"),
    [("?shard=3", 400), ("?shard=-1", 400), ("?shard=one", 400), ("?shard=2", 409)],
)
def test_failover_of_a_shard_that_does_not_exist_or_has_no_leader(sharded, query, code):
    locks = sharded(3)
    _lead(locks, "alpha", 0, 3)
    answer = staff_client().post(f"/api/v1/admin/scheduler/failover{query}")
    assert answer.status_code == code, answer.content
