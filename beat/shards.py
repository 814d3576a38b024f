"""Scheduler shards: SCHEDULER_SHARDS=N splits the schedules over N leader locks.

A task (or a DAG: its schedule is an entry of the same heap) belongs to shard `first 32 bits
of its id mod N` (stable: the id never changes, and
PostgreSQL computes the same number, so a shard loads only its own rows). Each shard has its
own lock, fencing epoch and standby, exactly as the single scheduler has; every beat process
keeps a warm engine for every shard and leads some of them. Shard 0 keeps the unsharded
lock's keys and does the fleet-wide duties (promoting pending runs, reaping, requeueing,
retention), so readiness reads it as before; the admin status and failover
(services.scheduler_control) cover every shard.

Fair spread: each beat announces itself and how many shards it leads in a Redis hash every
tick. A beat takes a free shard only while it leads fewer than its fair share
(ceil(N / live beats)), and hands one back (releases its lock and stays out of it a while,
or until another beat has taken it) when it leads more than that, or two more than the least
loaded live beat. A beat whose process dies drops out of the roster and its locks at once
(beat.presence), so the others take its shards within a standby's try (0.25 s); a stalled
one, within the lock TTL. A beat that joins gets its share without a restart.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import redis

from beat.presence import Presence, absent
from scheduler_app.shard_keys import roster_key

if TYPE_CHECKING:
    from beat.engine import SchedulerEngine

logger = logging.getLogger(__name__)


class BeatRoster:
    """Live beat processes and how many shards each leads, in one Redis hash. A beat whose
    process died leaves the fair share at once, by its presence (beat.presence), not only
    when its entry is `ttl` old; a stalled one leaves it by the TTL."""

    def __init__(self, client: redis.Redis, *, key_prefix: str, node_id: str, ttl: float):
        self._redis = client
        self.key = roster_key(key_prefix)
        self.node_id = node_id
        self.ttl = ttl
        self._presence = Presence(client, self._channel(node_id))

    def _channel(self, node: str) -> str:
        return f"{self.key}:alive:{node}"

    def report(self, leading: int) -> dict[str, int]:
        """Say this beat is alive and leads `leading` shards; return the live beats' counts."""
        now = time.time()
        entry = json.dumps({"at": now, "leads": leading, "presence": True})
        try:
            self._presence.announce()
            self._redis.hset(self.key, self.node_id, entry)
            raw = self._redis.hgetall(self.key)
        except redis.RedisError as error:
            logger.warning("beat roster unavailable: %s", error)
            return {self.node_id: leading}
        live, stale, announced = {}, [], []
        for node, value in raw.items():
            entry = json.loads(value)
            if now - entry["at"] <= self.ttl:
                live[node] = int(entry["leads"])
                if entry.get("presence") and node != self.node_id:
                    announced.append(node)
            elif now - entry["at"] > 10 * self.ttl:
                stale.append(node)
        try:
            gone = absent(self._redis, [self._channel(node) for node in announced])
        except redis.RedisError:
            gone = set()
        for node in announced:
            if self._channel(node) in gone:
                del live[node]  # its process is gone: its shards are free for a fair share
        if stale:
            with contextlib.suppress(redis.RedisError):
                self._redis.hdel(self.key, *stale)
        live[self.node_id] = leading
        return live

    def leave(self) -> None:
        with contextlib.suppress(redis.RedisError):
            self._redis.hdel(self.key, self.node_id)


class ShardSet:
    """The engines of one beat process, one per shard, ticked together."""

    def __init__(
        self, engines: Sequence[SchedulerEngine], *, roster: BeatRoster, lock_ttl: float
    ) -> None:
        self.engines = list(engines)
        self.roster = roster
        # After handing a shard back, stay out of it long enough for another beat to take it
        # (or until one has: its epoch moved past the one handed back).
        self._hold_off = 4 * lock_ttl
        self._held_off_until = [0.0] * len(self.engines)
        self._handed_back_epoch = [0] * len(self.engines)
        self._last_handback = 0.0

    def load(self) -> int:
        return sum(engine.load() for engine in self.engines)

    def leading(self) -> int:
        return sum(1 for engine in self.engines if engine.lock.is_held())

    def tick(self) -> float:
        live = self.roster.report(self.leading())
        fair = math.ceil(len(self.engines) / max(1, len(live)))
        now = time.monotonic()
        sleeps = []
        for index, engine in enumerate(self.engines):
            may_lead = engine.lock.is_held() or (
                self.leading() < fair and not self._held_off(index, now)
            )
            sleeps.append(engine.tick(may_lead=may_lead))
        self._hand_back_one(live, fair, now)
        return min(sleeps)

    def _held_off(self, index: int, now: float) -> bool:
        """Still staying out of a shard handed back? Not once another beat has taken it: if
        that beat dies, its shard must move within a standby's try like any other (the
        hold-off kept it where it was for up to 4 TTLs: seen, a killed beat's shards moving
        5.6 s after the kill, right after a rebalance)."""
        if now >= self._held_off_until[index]:
            return False
        holder = self.engines[index].lock.current_leader()
        if holder is not None and holder.epoch != self._handed_back_epoch[index]:
            self._held_off_until[index] = 0.0
            return False
        return True

    def _hand_back_one(self, live: dict[str, int], fair: int, now: float) -> None:
        leading = self.leading()
        least = min(
            (count for node, count in live.items() if node != self.roster.node_id), default=leading
        )
        if not (leading > fair or leading >= least + 2):
            return
        if now - self._last_handback < self._hold_off:
            return
        # The highest shard this beat leads; never shard 0 while another is left to give.
        held = [i for i, engine in enumerate(self.engines) if engine.lock.is_held()]
        index = held[-1]
        self._last_handback = now
        self._held_off_until[index] = now + self._hold_off
        self._handed_back_epoch[index] = self.engines[index].lock.epoch
        logger.info(
            "beat %s hands shard %d back (leads %d, fair share %d, live beats %d)",
            self.roster.node_id,
            index,
            leading,
            fair,
            len(live),
        )
        self.engines[index].lock.release()
        self.engines[index].leading = False

    def close(self) -> None:
        for engine in self.engines:
            engine.lock.release()
        self.roster.leave()
