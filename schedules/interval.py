"""Fixed-period schedules: `30s`, `5m`, `1h30m`, `PT30S`, `P1DT2H` ..."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from zoneinfo import ZoneInfo

from schedules.base import as_utc
from schedules.errors import expression_error

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MIN_PERIOD = timedelta(seconds=1)

_UNIT_SECONDS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}
_UNIT_ORDER = tuple(_UNIT_SECONDS)
_SHORT_TOKEN = re.compile(r"\s*(?P<amount>[0-9]+)\s*(?P<unit>[A-Za-z]+)\s*")
_NUMBER = r"[0-9]+(?:[.,][0-9]+)?"
_ISO = re.compile(
    rf"^P(?:(?P<w>{_NUMBER})W)?(?:(?P<d>{_NUMBER})D)?"
    rf"(?:T(?:(?P<h>{_NUMBER})H)?(?:(?P<m>{_NUMBER})M)?(?:(?P<s>{_NUMBER})S)?)?$"
)
_HINT = "expected e.g. 30s, 5m, 2h, 1d, 1h30m, or ISO-8601 like PT30S or P1DT2H"


def parse_interval(text: str) -> timedelta:
    """Parse an interval; raise ScheduleError(field="schedule.expression") when invalid."""
    if not isinstance(text, str) or not text.strip():
        raise expression_error(f"interval is required ({_HINT})")
    return _parse_interval(text.strip())


@lru_cache(maxsize=4096)
def _parse_interval(stripped: str) -> timedelta:
    iso = stripped[0] in "Pp"
    period = _parse_iso(stripped.upper()) if iso else _parse_short(stripped)
    if period < MIN_PERIOD:
        raise expression_error(f"interval must be at least 1 second, got {stripped!r}")
    return period


def _parse_short(text: str) -> timedelta:
    if text.isascii() and text.isdigit():
        raise expression_error(f"interval {text!r} is missing a unit ({_HINT})")
    total = 0
    position = 0
    previous = -1
    while position < len(text):
        match = _SHORT_TOKEN.match(text, position)
        if match is None:
            raise expression_error(f"invalid interval {text!r} ({_HINT})")
        unit = match.group("unit").lower()
        if unit not in _UNIT_SECONDS:
            raise expression_error(
                f"interval {text!r}: unknown unit {match.group('unit')!r} (use w, d, h, m or s)"
            )
        order = _UNIT_ORDER.index(unit)
        if order <= previous:
            raise expression_error(
                f"interval {text!r}: each unit may appear once, largest first (e.g. 1h30m)"
            )
        previous = order
        total += int(match.group("amount")) * _UNIT_SECONDS[unit]
        position = match.end()
    return _seconds(Decimal(total), text)


def _parse_iso(text: str) -> timedelta:
    date_part = text.split("T", 1)[0]
    if "Y" in text or "M" in date_part:
        raise expression_error(
            f"ISO-8601 duration {text!r}: years and months are not supported (their length "
            "varies); use days or weeks, e.g. P30D"
        )
    match = _ISO.match(text)
    if match is None or not any(match.groupdict().values()) or text.endswith("T"):
        raise expression_error(f"invalid ISO-8601 duration {text!r} ({_HINT})")
    try:
        total = sum(
            Decimal(amount.replace(",", ".")) * _UNIT_SECONDS[unit]
            for unit, amount in match.groupdict().items()
            if amount is not None
        )
    except InvalidOperation:  # pragma: no cover - the regex only lets numbers through
        raise expression_error(f"invalid ISO-8601 duration {text!r}") from None
    return _seconds(Decimal(total), text)


def _seconds(total: Decimal, text: str) -> timedelta:
    try:
        return timedelta(microseconds=int(total * 1_000_000))
    except OverflowError:
        raise expression_error(f"interval {text!r} is too large") from None


@dataclass(frozen=True, slots=True)
class IntervalSchedule:
    """Fires at anchor + k * period for k = 0, 1, 2, ...; the zone is only informative."""

    period: timedelta
    anchor: datetime
    timezone: ZoneInfo
    expression: str = ""

    schedule_type = "interval"

    def __post_init__(self) -> None:
        if self.period < MIN_PERIOD:
            raise ValueError("period must be at least 1 second")
        object.__setattr__(self, "anchor", as_utc(self.anchor, name="anchor"))

    def next_after(self, moment: datetime) -> datetime | None:
        moment = as_utc(moment)
        if moment < self.anchor:
            return self.anchor
        periods = (moment - self.anchor) // self.period + 1
        try:
            return self.anchor + periods * self.period
        except OverflowError:
            return None
