"""Cron schedules evaluated on an IANA zone's wall clock, with Vixie cron's DST rule.

* Minute and hour fields both fixed (neither starts with `*`: `30 2 * * *`, `0,30 9-17 * * *`):
  the schedule means "at these wall-clock times". A wall time skipped by spring-forward fires
  once at the first valid instant after the gap (matches inside one gap collapse into that
  single fire); a wall time repeated by fall-back fires once, at its first occurrence.
* Minute or hour field starting with `*` (`0 * * * *`, `*/15 1 * * *`, `* 2 * * *`): the
  schedule follows the wall clock: nothing fires in the skipped hour and the repeated hour
  fires in both occurrences.

This is Vixie cron's rule exactly: its `cron.c` treats an entry as a "wildcard job" when its
minute or hour field begins with `*` (`MIN_STAR|HR_STAR`). When the clock jumps forward it
runs the fixed jobs of the skipped minutes once and the wildcard jobs only at the new time;
when it jumps back it runs only the wildcard jobs until the clock catches up. A seconds field
(our 6-field form; Vixie has none) does not change the mode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from schedules.base import as_utc
from schedules.cron_engine import CompiledCron, WallTime, compile_cron
from schedules.timezones import is_utc, transition_between

# Converting to a zone west of UTC underflows datetime.min; nothing fires that early anyway.
_EARLIEST = datetime(1, 1, 2, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class CronSchedule:
    expression: str
    timezone: ZoneInfo
    cron: CompiledCron = field(init=False, repr=False, compare=False)
    _utc: bool = field(init=False, repr=False, compare=False)

    schedule_type = "cron"

    def __post_init__(self) -> None:
        object.__setattr__(self, "cron", compile_cron(self.expression))
        object.__setattr__(self, "_utc", is_utc(self.timezone))

    @property
    def follows_wall_clock(self) -> bool:
        """True when the minute or hour field starts with `*` (see the module docstring)."""
        return self.cron.follows_wall_clock

    def next_after(self, moment: datetime) -> datetime | None:
        if moment.tzinfo is not UTC:
            moment = as_utc(moment)
        cron = self.cron
        try:
            if self._utc:
                found = cron.next_match(
                    moment.year,
                    moment.month,
                    moment.day,
                    moment.hour,
                    moment.minute,
                    moment.second + 1,  # strictly after; the engine carries second=60
                )
                return None if found is None else datetime(*found, tzinfo=UTC)
            if moment < _EARLIEST:
                moment = _EARLIEST
            local = moment.astimezone(self.timezone)
            found = cron.next_match(
                local.year, local.month, local.day, local.hour, local.minute, local.second + 1
            )
            if cron.follows_wall_clock:
                return self._next_wall_clock(moment, local, found)
            return self._next_fixed(moment, found)
        except OverflowError:  # past datetime.max: never again
            return None

    def _next_fixed(self, moment: datetime, found: WallTime | None) -> datetime | None:
        """Fires = {resolve(t) : t matches}; resolve is monotone in t, so scan forward."""
        zone, cron = self.timezone, self.cron
        while found is not None:
            offset0 = zone.utcoffset(datetime(*found))  # noqa: DTZ001 - wall time
            offset1 = zone.utcoffset(datetime(*found, fold=1))  # noqa: DTZ001 - wall time
            assert offset0 is not None and offset1 is not None
            base = datetime(*found, tzinfo=UTC)  # the wall time, labelled UTC for arithmetic
            if offset0 == offset1:
                return base - offset0
            if offset0 > offset1:  # repeated wall time: only its first occurrence fires
                first = base - offset0
                if first > moment:
                    return first
                # `moment` is in the second pass: skip the rest of the repeated hour.
                transition = transition_between(zone, first, base - offset1)
                found = cron.next_match_from(transition + offset0)
                continue
            # Skipped wall time: fire at the end of the gap (the transition instant).
            return transition_between(zone, base - offset1, base - offset0)
        return None

    def _next_wall_clock(
        self, moment: datetime, local: datetime, found: WallTime | None
    ) -> datetime | None:
        """Fires = {u : wall clock at u matches}: skip gaps, fire in both passes of a fold."""
        zone, cron = self.timezone, self.cron
        if local.fold == 0:
            offset = local.utcoffset()
            wall = datetime(  # noqa: DTZ001 - wall time
                local.year, local.month, local.day, local.hour, local.minute, local.second, fold=1
            )
            offset1 = zone.utcoffset(wall)
            assert offset is not None and offset1 is not None
            if offset1 < offset:
                # `moment` is in the first pass of a repeated hour: finish the first pass,
                # then replay the repeated wall times in the second pass.
                base = wall.replace(tzinfo=UTC, fold=0)
                transition = transition_between(zone, base - offset, base - offset1)
                fold_end = transition + offset  # wall time, labelled UTC for comparisons
                if found is not None and (candidate := datetime(*found, tzinfo=UTC)) < fold_end:
                    return candidate - offset
                found = cron.next_match_from(transition + offset1)
                if found is not None and (candidate := datetime(*found, tzinfo=UTC)) < fold_end:
                    return candidate - offset1
                found = cron.next_match_from(fold_end)
        while found is not None:
            offset0 = zone.utcoffset(datetime(*found))  # noqa: DTZ001 - wall time
            offset1 = zone.utcoffset(datetime(*found, fold=1))  # noqa: DTZ001 - wall time
            assert offset0 is not None and offset1 is not None
            base = datetime(*found, tzinfo=UTC)  # the wall time, labelled UTC for arithmetic
            if offset0 == offset1:
                return base - offset0
            if offset0 > offset1:  # repeated: first pass unless `moment` is already past it
                first = base - offset0
                return first if first > moment else base - offset1
            # Skipped wall time: nothing fires; resume at the end of the gap.
            transition = transition_between(zone, base - offset1, base - offset0)
            found = cron.next_match_from(transition + offset1)
        return None
