"""Shared value types: the `Schedule` protocol, `FireTime`, and moment normalisation."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable
from zoneinfo import ZoneInfo


@runtime_checkable
class Schedule(Protocol):
    """Anything that can say when it fires next.

    `next_after` takes an aware datetime and returns the first fire strictly after it as an
    aware UTC datetime, or None when the schedule never fires again.
    """

    @property
    def timezone(self) -> ZoneInfo: ...

    def next_after(self, moment: datetime) -> datetime | None: ...


@dataclass(frozen=True, slots=True)
class FireTime:
    """One fire: the UTC instant and the same instant on the schedule's wall clock."""

    utc: datetime
    local: datetime


def as_utc(moment: datetime, *, name: str = "moment") -> datetime:
    """Return `moment` as an aware UTC datetime; naive datetimes are a programming error."""
    tzinfo = moment.tzinfo
    if tzinfo is UTC:
        return moment
    if tzinfo is None or tzinfo.utcoffset(moment) is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got {moment!r}")
    return moment.astimezone(UTC)
