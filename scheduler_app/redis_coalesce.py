"""Counter writes of many runs folded into few Redis commands.

The per-run bookkeeping (`..._into(pipe, ...)` helpers: counters, histograms, fleet and quota
counters) is written against a pipeline. For a batch of runs most of it lands on the same
keys and fields, so `CoalescedWrites` stands in for the pipeline: increments of the same key
(and hash field) are summed, an expiry is set once per key, removals from one sorted set
go in one ZREM, and anything else (stream entries) passes through in order. `send_into`
then queues the folded commands on a real pipeline: increments first, then the
pass-through commands, then the expiries, so no expiry can land before the write that
creates its key.

Only for writes whose replies nobody reads: a folded command has no per-run reply.
"""

from __future__ import annotations

from typing import Any


class CoalescedWrites:
    def __init__(self) -> None:
        self._increments: dict[tuple[str, str, str | None], float] = {}
        self._expiries: dict[str, int] = {}
        self._removals: dict[str, list[Any]] = {}
        self._others: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def _add(self, command: str, key: str, field: str | None, amount: float) -> None:
        slot = (command, key, field)
        self._increments[slot] = self._increments.get(slot, 0) + amount

    # the pipeline methods the `_into` helpers use ----------------------------------------
    def incr(self, key: str, amount: int = 1) -> None:
        self._add("incrby", key, None, amount)

    incrby = incr

    def decr(self, key: str, amount: int = 1) -> None:
        self._add("incrby", key, None, -amount)

    def incrbyfloat(self, key: str, amount: float = 1.0) -> None:
        self._add("incrbyfloat", key, None, amount)

    def hincrby(self, key: str, field: str, amount: int = 1) -> None:
        self._add("hincrby", key, field, amount)

    def hincrbyfloat(self, key: str, field: str, amount: float = 1.0) -> None:
        self._add("hincrbyfloat", key, field, amount)

    def expire(self, key: str, seconds: int) -> None:
        self._expiries[key] = max(int(seconds), self._expiries.get(key, 0))

    def zrem(self, key: str, *members: Any) -> None:
        self._removals.setdefault(key, []).extend(members)

    def xadd(self, *args: Any, **kwargs: Any) -> None:
        self._others.append(("xadd", args, kwargs))

    # ---------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._increments) + len(self._expiries) + len(self._removals) + len(self._others)

    def send_into(self, pipe) -> None:
        for (command, key, field), amount in self._increments.items():
            if command in ("incrby", "hincrby"):
                amount = int(amount)  # sent even when 0: the key then exists, as it would
            args = (key, amount) if field is None else (key, field, amount)
            getattr(pipe, command)(*args)
        for key, members in self._removals.items():
            pipe.zrem(key, *members)
        for command, args, kwargs in self._others:
            getattr(pipe, command)(*args, **kwargs)
        for key, seconds in self._expiries.items():
            pipe.expire(key, seconds)
