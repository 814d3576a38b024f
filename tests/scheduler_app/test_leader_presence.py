"""The leader lock's presence (beat/lock.py) on the real Redis: a standby takes the lock at
once from a holder whose process is gone (its presence connection closed), and only the TTL
moves it away from a holder that is alive but silent."""

from __future__ import annotations

import time
import uuid

import pytest
import redis
from django.conf import settings

from beat.lock import LeaderLock

TTL = 30.0  # long: every takeover below must come from presence, never from expiry


def _node(name: str, prefix: str) -> LeaderLock:
    # A client of its own per node, as two beat processes have.
    client = redis.Redis.from_url(settings.REDIS_URL, decode_responses=True)
    return LeaderLock(client, key_prefix=prefix, node_id=name, ttl_seconds=TTL)


@pytest.fixture
def prefix(redis_client):
    prefix = f"presence-{uuid.uuid4().hex[:8]}:"
    yield prefix
    for key in redis_client.scan_iter(match=f"{prefix}*"):
        redis_client.delete(key)


def _stop_renewing(lock: LeaderLock) -> None:
    lock._stop.set()


def test_a_standby_takes_over_at_once_from_a_holder_whose_process_is_gone(prefix):
    alpha, beta = _node("alpha", prefix), _node("beta", prefix)
    assert alpha.try_acquire()
    assert not beta.try_acquire()  # alpha is alive: its presence holds the lock for it
    _stop_renewing(alpha)
    # What the kernel does to a SIGKILLed process's sockets: alpha's connections close.
    alpha._presence.close()
    alpha._redis.close()
    started = time.monotonic()
    assert beta.try_acquire()
    assert time.monotonic() - started < TTL / 2  # not by waiting out the TTL
    assert beta.epoch == alpha.epoch + 1
    assert beta.current_leader().node == "beta"
    beta.release()


def test_a_silent_holder_that_is_alive_keeps_the_lock_until_its_ttl(prefix):
    alpha, beta = _node("alpha", prefix), _node("beta", prefix)
    assert alpha.try_acquire()
    _stop_renewing(alpha)  # a stalled leader: no renewal, but its process and sockets live
    for _ in range(5):
        assert not beta.try_acquire()
    assert beta.current_leader().node == "alpha"
    alpha.release()
    assert beta.try_acquire()
    beta.release()


def test_the_old_holder_learns_on_its_next_renewal_that_the_lock_moved(prefix):
    alpha, beta = _node("alpha", prefix), _node("beta", prefix)
    assert alpha.try_acquire()
    _stop_renewing(alpha)
    alpha._presence.close()  # its presence connection lost, its process alive
    alpha._presence = None
    assert beta.try_acquire()
    assert alpha.renew() is False
    assert not alpha.is_held()
    beta.release()


def test_a_holder_re_announces_its_presence_after_its_connection_broke(prefix):
    alpha, beta = _node("alpha", prefix), _node("beta", prefix)
    assert alpha.try_acquire()
    alpha.release()
    alpha._presence.connection.disconnect()  # e.g. Redis restarted under it
    assert alpha.try_acquire()  # pings, finds the connection dead, subscribes again
    assert not beta.try_acquire()
    alpha.release()


def test_a_lock_taken_without_announcing_presence_is_left_to_its_ttl(prefix, redis_client):
    beta = _node("beta", prefix)
    alpha = _node("alpha", prefix)
    assert alpha.try_acquire()
    alpha.release()
    # Someone holds the lock who never announced a presence (the info still names alpha's).
    redis_client.set(beta.lock_key, "someone-else", px=int(TTL * 1000))
    assert not beta.try_acquire()


def test_a_dead_beat_leaves_the_shards_fair_share_at_once(prefix):
    from beat.shards import BeatRoster

    def roster(name: str) -> BeatRoster:
        client = redis.Redis.from_url(settings.REDIS_URL, decode_responses=True)
        return BeatRoster(client, key_prefix=prefix, node_id=name, ttl=TTL)

    alpha, beta = roster("alpha"), roster("beta")
    alpha.report(2)
    assert beta.report(0) == {"alpha": 2, "beta": 0}
    alpha._presence.close()  # SIGKILLed: its sockets closed, its roster entry still fresh
    assert beta.report(0) == {"beta": 0}
    alpha.report(1)  # back (a restart): it announces itself again
    assert beta.report(0) == {"alpha": 1, "beta": 0}
