"""How the beats of a sharded fleet share the shards (beat/shards.py), with each beat's
ShardSet ticked directly: real engines, real Redis locks and presence, the test database."""

from __future__ import annotations

import uuid

import pytest
import redis
from django.conf import settings

from beat.engine import EngineConfig, SchedulerEngine
from beat.lock import LeaderLock
from beat.shards import BeatRoster, ShardSet
from scheduler_app.shard_keys import roster_ttl, shard_key_prefix, shard_node_id

pytestmark = pytest.mark.django_db(transaction=True)

SHARDS = 2
# Long: no lock below may move by expiring, and a hand-back's hold-off (4 TTLs) is 2 minutes.
TTL = 30.0
CONFIG = EngineConfig(
    tick_seconds=0.2,
    batch_size=500,
    catchup_window_seconds=300,
    requeue_grace_seconds=60,
    housekeeping_seconds=60,
    lock_ttl_seconds=TTL,
)


@pytest.fixture
def fleet():
    """`beat(name)`: the ShardSet of a beat process of its own (its own Redis client), as
    `celery beat` builds it; every lock released at the end."""
    prefix = f"{settings.SCHEDULER['REDIS_KEY_PREFIX']}{uuid.uuid4().hex[:6]}:"
    started: list[ShardSet] = []

    def beat(name: str) -> ShardSet:
        client = redis.Redis.from_url(settings.REDIS_URL, decode_responses=True)
        engines = [
            SchedulerEngine(
                lock=LeaderLock(
                    client,
                    key_prefix=shard_key_prefix(prefix, index),
                    node_id=shard_node_id(name, index, SHARDS),
                    ttl_seconds=TTL,
                ),
                config=CONFIG,
                shard=(index, SHARDS),
            )
            for index in range(SHARDS)
        ]
        roster = BeatRoster(client, key_prefix=prefix, node_id=name, ttl=roster_ttl(TTL))
        shard_set = ShardSet(engines, roster=roster, lock_ttl=TTL)
        shard_set.load()
        started.append(shard_set)
        return shard_set

    yield beat
    for shard_set in started:
        shard_set.close()


def _die(beat: ShardSet) -> None:
    """What SIGKILL does to a beat: it stops renewing, and the kernel closes its sockets (its
    locks' presence and its roster presence go at once; the locks stay until their TTL)."""
    for engine in beat.engines:
        engine.lock._stop.set()
        engine.lock._presence.close()
    beat.roster._presence.close()


def test_a_shard_handed_back_moves_at_once_when_the_beat_that_took_it_dies(fleet):
    """A beat stays out of a shard it handed back for 4 lock TTLs, so that another can take
    it; it kept staying out after the other had taken it and died, and the dead beat's shard
    waited for the hold-off (a killed beat's shards moved 5.6 s after the kill)."""
    alpha = fleet("alpha")
    alpha.tick()
    assert alpha.leading() == 2  # alone: both shards
    beta = fleet("beta")
    beta.tick()  # alpha is alive and holds both: nothing to take yet
    alpha.tick()  # two beats: alpha hands shard 1 back and stays out of it
    assert [engine.lock.is_held() for engine in alpha.engines] == [True, False]
    beta.tick()
    taken = beta.engines[1].lock.current_leader()
    assert taken.node == "beta/shard-1" and beta.leading() == 1

    _die(beta)
    alpha.tick()

    assert alpha.leading() == 2
    holder = alpha.engines[1].lock.current_leader()
    assert holder.node == "alpha/shard-1" and holder.epoch == taken.epoch + 1
