"""A clock a test moves itself, for the code that takes one (`SchedulerEngine(clock=...)`):
instead of sleeping until a moment, the test moves the clock there."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone


class ManualClock:
    """Reads the moment it was started at (now, by default) until moved. Code that also
    reads the database's clock (a scheduler engine's change feed: what changed since its
    last poll) sees nothing move there: keep it behind the real time, or make the
    changes before moving it."""

    def __init__(self, start: datetime | None = None) -> None:
        self.moment = start or timezone.now()

    def __call__(self) -> datetime:
        return self.moment

    def advance(self, seconds: float) -> datetime:
        self.moment += timedelta(seconds=seconds)
        return self.moment
