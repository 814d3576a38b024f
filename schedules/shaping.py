"""Schedule wrappers for per-task policies: an active window and a deterministic jitter.

Both keep `next_after` strictly increasing and deterministic, so every scheduler instance
computes the same fire instants and UNIQUE(task, scheduled_at, attempt) still makes a fire
happen once, whoever leads.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from schedules.base import Schedule


@dataclass(frozen=True, slots=True)
class WindowedSchedule:
    """Fires only inside [start_at, end_at] (either end open when None)."""

    inner: Schedule
    start_at: datetime | None
    end_at: datetime | None

    @property
    def timezone(self) -> ZoneInfo:
        return self.inner.timezone

    def next_after(self, moment: datetime) -> datetime | None:
        if self.start_at is not None and moment < self.start_at:
            # The first fire at or after start_at.
            moment = self.start_at - timedelta(microseconds=1)
        fire = self.inner.next_after(moment)
        if fire is None or (self.end_at is not None and fire > self.end_at):
            return None
        return fire


@dataclass(frozen=True, slots=True)
class JitteredSchedule:
    """Each nominal fire moves later by a stable pseudo-random 0..jitter_seconds whole
    seconds, derived from the task id and the nominal instant (same on every node)."""

    inner: Schedule
    jitter_seconds: int
    seed: str

    @property
    def timezone(self) -> ZoneInfo:
        return self.inner.timezone

    def offset(self, nominal: datetime) -> timedelta:
        digest = hashlib.blake2b(
            f"{self.seed}:{nominal.timestamp():.6f}".encode(), digest_size=8
        ).digest()
        return timedelta(seconds=int.from_bytes(digest, "big") % (self.jitter_seconds + 1))

    def next_after(self, moment: datetime) -> datetime | None:
        nominal = self.inner.next_after(moment - timedelta(seconds=self.jitter_seconds))
        while nominal is not None:
            fire = nominal + self.offset(nominal)
            if fire > moment:
                return fire
            nominal = self.inner.next_after(nominal)
        return None
