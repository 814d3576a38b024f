"""The leader lock: one scheduler fires at a time.

SET NX PX with a random owner token; renewed by compare-and-pexpire every TTL/3 from a
thread of its own, so a long tick can never outlive the lock; released by
compare-and-delete. Each acquisition increments a fencing epoch. The holder trusts its
leadership only until `valid_until`, measured from *before* the renewal was sent and cut
short by a safety margin, so a leader that cannot renew stops firing before the lock
could have expired in Redis and a standby could take it.

Presence, for a failover faster than the TTL: before it tries for the lock, a node
subscribes, on a connection of its own, to a channel named after its token. A process that
dies (SIGKILL, OOM kill, a crash) has its connections closed by the kernel at once, so the
channel's subscriber count (PUBSUB NUMSUB) drops to 0 while the lock still has most of its
TTL to run; a standby that sees that takes the lock over in one script, without waiting out
the TTL. A leader that is alive but stalled (SIGSTOP, CPU starvation) keeps its connection
and its presence, so only the TTL can move the lock away from it, as before. Two leaders
overlapping for a moment (a presence connection lost while its process lives on for the
rest of its trust window) cannot double a fire: fires are recorded with ON CONFLICT DO
NOTHING on (task, fire time, attempt) and only recorded fires are published.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import redis

from beat.presence import Presence

logger = logging.getLogger(__name__)

# KEYS: lock, epoch, info; ARGV: token, ttl_ms, node_id, now_epoch_seconds
_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local epoch = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[3], 'node', ARGV[3], 'epoch', epoch, 'since', ARGV[4],
             'presence', ARGV[1])
  return epoch
end
return 0
"""
# The same, over a holder whose presence channel has no subscriber left (its process died).
# Only a holder that took the lock announcing its presence (the info names its token) is
# judged so; one that set the lock any other way keeps it until its TTL.
# KEYS: lock, epoch, info; ARGV: token, ttl_ms, node_id, now_epoch_seconds, channel_prefix
_TAKE_OVER = """
local holder = redis.call('GET', KEYS[1])
if not holder or redis.call('HGET', KEYS[3], 'presence') ~= holder then
  return 0
end
if redis.call('PUBSUB', 'NUMSUB', ARGV[5] .. holder)[2] ~= 0 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local epoch = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[3], 'node', ARGV[3], 'epoch', epoch, 'since', ARGV[4],
           'presence', ARGV[1])
return epoch
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

SAFETY_FRACTION = 0.8  # trust a renewal for 80% of the TTL: room for clock drift and latency


@dataclass(frozen=True)
class LeaderInfo:
    node: str
    epoch: int
    since: float


class LeaderLock:
    def __init__(self, client: redis.Redis, *, key_prefix: str, node_id: str, ttl_seconds: float):
        self._redis = client
        self.lock_key = f"{key_prefix}scheduler:leader"
        self.epoch_key = f"{key_prefix}scheduler:epoch"
        self.info_key = f"{key_prefix}scheduler:leader-info"
        # Set by the failover endpoint: this node releases the lock and stays out a while.
        self.yield_key = f"{key_prefix}scheduler:yield:{node_id}"
        self.presence_prefix = f"{key_prefix}scheduler:alive:"
        # How far the leader has recorded every due fire (engine._fire_due), for standbys.
        self.progress_key = f"{key_prefix}scheduler:fired-through"
        self.node_id = node_id
        self.ttl_ms = int(ttl_seconds * 1000)
        self._token = f"{node_id}:{uuid.uuid4().hex}"
        self._acquire = client.register_script(_ACQUIRE)
        self._take_over = client.register_script(_TAKE_OVER)
        self._presence = Presence(client, self.presence_prefix + self._token)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._state = threading.Lock()
        self._valid_until = 0.0
        self._leading = False
        self.epoch = 0
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    # -- state ------------------------------------------------------------------
    def is_held(self) -> bool:
        with self._state:
            return time.monotonic() < self._valid_until

    def _trust_until(self, sent_at: float) -> None:
        with self._state:
            self._valid_until = sent_at + self.ttl_ms / 1000 * SAFETY_FRACTION

    def _lose(self, reason: str) -> None:
        # Said once per leadership, even when the trust window had already lapsed (a process
        # frozen past its TTL learns only on waking that the lock is someone else's).
        with self._state:
            was_leading = self._leading
            self._leading = False
            self._valid_until = 0.0
        if was_leading:
            logger.warning("scheduler %s lost leadership: %s", self.node_id, reason)

    # -- operations ---------------------------------------------------------------
    def try_acquire(self) -> bool:
        """Take the lock if it is free. True if this node leads after the call."""
        if self.is_held():
            return True
        if self._asked_to_yield():
            return False
        sent_at = time.monotonic()
        keys = [self.lock_key, self.epoch_key, self.info_key]
        args = [self._token, self.ttl_ms, self.node_id, f"{time.time():.3f}"]
        took_over = False
        try:
            self._presence.announce()  # seen before it can hold the lock
            epoch = int(self._acquire(keys=keys, args=args))
            if epoch == 0:
                epoch = int(self._take_over(keys=keys, args=[*args, self.presence_prefix]))
                took_over = epoch != 0
        except redis.RedisError as error:
            logger.warning("leader lock acquire failed: %s", error)
            return False
        if epoch == 0:
            return False
        self.epoch = epoch
        self._trust_until(sent_at)
        with self._state:
            self._leading = True
        how = " from a leader whose process is gone" if took_over else ""
        logger.info("scheduler %s is now the leader (epoch %s)%s", self.node_id, epoch, how)
        self._start_renewer()
        return True

    def renew(self) -> bool:
        sent_at = time.monotonic()
        try:
            renewed = bool(self._renew(keys=[self.lock_key], args=[self._token, self.ttl_ms]))
        except redis.RedisError as error:
            self._lose(f"renewal failed: {error}")
            return False
        if not renewed:
            self._lose("the lock belongs to someone else")
            return False
        self._trust_until(sent_at)
        return True

    def release(self) -> None:
        self._stop.set()
        self._lose("released")
        try:
            self._release(keys=[self.lock_key], args=[self._token])
        except redis.RedisError as error:
            logger.warning("leader lock release failed: %s", error)

    def _asked_to_yield(self) -> bool:
        try:
            return bool(self._redis.exists(self.yield_key))
        except redis.RedisError:
            return False

    def mark_fired_through(self, instant: datetime) -> None:
        """Say that every fire due by `instant` is recorded (by this leader or before it)."""
        try:
            self._redis.set(self.progress_key, f"{instant.timestamp():.6f}", px=self.ttl_ms * 20)
        except redis.RedisError as error:
            logger.debug("could not record the fired-through mark: %s", error)

    def fired_through(self) -> datetime | None:
        try:
            value = self._redis.get(self.progress_key)
        except redis.RedisError:
            return None
        return datetime.fromtimestamp(float(value), tz=UTC) if value else None

    def current_leader(self) -> LeaderInfo | None:
        """Who holds the lock now, as far as Redis knows (None when nobody does)."""
        try:
            pipe = self._redis.pipeline()
            pipe.get(self.lock_key)
            pipe.hgetall(self.info_key)
            holder, info = pipe.execute()
        except redis.RedisError:
            return None
        if not holder or not info:
            return None
        return LeaderInfo(
            node=info.get("node", ""),
            epoch=int(info.get("epoch", 0)),
            since=float(info.get("since", 0)),
        )

    # -- renewal thread -----------------------------------------------------------
    def _start_renewer(self) -> None:
        if self._renewer is not None and self._renewer.is_alive():
            return
        self._stop.clear()
        self._renewer = threading.Thread(
            target=self._renew_loop, name="leader-lock-renewer", daemon=True
        )
        self._renewer.start()

    def _renew_loop(self) -> None:
        interval = self.ttl_ms / 1000 / 3
        while not self._stop.wait(interval):
            if self._asked_to_yield():
                logger.warning("scheduler %s yields leadership (failover requested)", self.node_id)
                self.release()
                return
            if not self.renew():
                return
