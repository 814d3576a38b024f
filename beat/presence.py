"""Presence: a process says it is alive by holding a subscription to a Redis channel.

The subscription lives on a connection of its own. A process that dies (SIGKILL, OOM kill,
a crash) has its sockets closed by the kernel at once, so the channel's subscriber count
(PUBSUB NUMSUB) drops to 0 within milliseconds, long before any TTL the process was
renewing would run out. A process that is alive but stalled (SIGSTOP, CPU starvation)
keeps its connection and so its presence: only a TTL can tell about those.

Used by the leader lock (a standby takes the lock at once from a dead holder) and by the
beat roster (a dead beat stops counting in the shards' fair share at once).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import redis

CONFIRM_SECONDS = 2.0


class Presence:
    def __init__(self, client: redis.Redis, channel: str) -> None:
        self._redis = client
        self.channel = channel
        self._pubsub: redis.client.PubSub | None = None

    def announce(self) -> None:
        """Subscribe (once, and again after the connection broke) and wait for Redis to
        confirm it: a caller may rely on being seen once this returns."""
        if self._pubsub is not None:
            try:
                self._pubsub.ping()  # a dead connection fails here (or at the next call)
                while self._pubsub.get_message(timeout=0) is not None:
                    pass  # the PONGs: nothing may pile up on a connection nobody reads
                return
            except redis.RedisError:
                self.close()
        pubsub = self._redis.pubsub()
        try:
            pubsub.subscribe(self.channel)
            deadline = time.monotonic() + CONFIRM_SECONDS
            while time.monotonic() < deadline:
                message = pubsub.get_message(timeout=0.1)
                if message is not None and message["type"] in ("subscribe", b"subscribe"):
                    self._pubsub = pubsub
                    return
        except redis.RedisError:
            pubsub.close()
            raise
        pubsub.close()
        raise redis.TimeoutError("Redis did not confirm the presence subscription")

    def close(self) -> None:
        """Withdraw: what a dying process's kernel does to its sockets."""
        if self._pubsub is not None:
            self._pubsub.close()
            self._pubsub = None

    @property
    def connection(self):
        return self._pubsub.connection if self._pubsub is not None else None


def absent(client: redis.Redis, channels: Sequence[str]) -> set[str]:
    """The channels nobody holds (one round trip for all of them)."""
    if not channels:
        return set()
    counts = client.execute_command("PUBSUB", "NUMSUB", *channels)
    pairs = zip(counts[::2], counts[1::2], strict=True)
    return {
        name.decode() if isinstance(name, bytes) else name
        for name, count in pairs
        if int(count) == 0
    }
