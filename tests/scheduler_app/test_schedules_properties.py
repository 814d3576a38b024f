"""Hypothesis property tests for cron evaluation.

Expressions are drawn as structured fields, so the tests know the allowed values without
using the package's parser, and an independent (slow, obvious) matcher checks every fire.
  * in UTC, results equal croniter's get_next (5 fields, and 6 with seconds first);
  * in any zone, next_after is strictly increasing and every fire matches the expression
    (or, for fixed-hour expressions, is the end of a DST gap containing a match);
  * around real DST transitions, fires_between equals a minute-by-minute brute force.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from schedules import CronSchedule, ScheduleError, fires_between, parse_schedule

MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
WEEKDAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
ZONES = [
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",  # 30-minute DST shift
    "Australia/Sydney",  # southern hemisphere
    "America/Santiago",
    "Asia/Kolkata",  # no DST, +05:30
]
# (zone, a DST transition instant in UTC)
TRANSITIONS = [
    ("America/New_York", datetime(2024, 3, 10, 7, tzinfo=UTC)),
    ("America/New_York", datetime(2024, 11, 3, 6, tzinfo=UTC)),
    ("Europe/Berlin", datetime(2024, 3, 31, 1, tzinfo=UTC)),
    ("Europe/Berlin", datetime(2024, 10, 27, 1, tzinfo=UTC)),
    ("Australia/Lord_Howe", datetime(2024, 4, 6, 15, tzinfo=UTC)),
    ("Australia/Lord_Howe", datetime(2024, 10, 5, 15, 30, tzinfo=UTC)),
    ("Australia/Sydney", datetime(2024, 4, 6, 16, tzinfo=UTC)),
    ("Australia/Sydney", datetime(2024, 10, 5, 16, tzinfo=UTC)),
]


@dataclass(frozen=True)
class Field:
    text: str
    values: frozenset[int]
    # `a-a`: croniter (wrongly) reads it as `*`, so such fields are kept out of the oracle test.
    single_value_range: bool = False


@dataclass(frozen=True)
class DayOfMonth:
    text: str
    days: frozenset[int]
    last_minus: frozenset[int]
    nearest: frozenset[int]
    last_weekday: bool
    single_value_range: bool = False


@dataclass(frozen=True)
class DayOfWeek:
    text: str
    weekdays: frozenset[int]
    nth: frozenset[tuple[int, int]]
    last: frozenset[int]
    single_value_range: bool = False


@dataclass(frozen=True)
class Expression:
    second: Field | None
    minute: Field
    hour: Field
    dom: DayOfMonth
    month: Field
    dow: DayOfWeek

    @property
    def text(self) -> str:
        fields = [self.minute.text, self.hour.text, self.dom.text, self.month.text, self.dow.text]
        return " ".join(([self.second.text] if self.second else []) + fields)

    @property
    def follows_wall_clock(self) -> bool:
        # Vixie's "wildcard job": MIN_STAR or HR_STAR (the seconds field does not count).
        return self.minute.text.startswith(("*", "?")) or self.hour.text.startswith(("*", "?"))

    @property
    def has_single_value_range(self) -> bool:
        fields = (self.second, self.minute, self.hour, self.month, self.dom, self.dow)
        return any(field is not None and field.single_value_range for field in fields)


# -- strategies ------------------------------------------------------------------------------


@st.composite
def plain_fields(
    draw: st.DrawFn, low: int, high: int, names: list[str] | None = None, weekday: bool = False
) -> Field:
    """`*`, `*/n`, `n`, lists, `a-b`, `a-b/n`, `a/n`; names sometimes; weekday 7 = Sunday."""
    top = 7 if weekday else high

    def render(value: int) -> str:
        if names and value - low < len(names) and draw(st.booleans()):
            return names[value - low]
        return str(value)

    kinds = ["star", "star", "star_step", "value", "list", "range", "range_step", "a/n"]
    kind = draw(st.sampled_from(kinds))
    if kind == "star":
        text, values = "*", set(range(low, high + 1))
    elif kind == "star_step":
        step = draw(st.integers(1, high - low + 1))
        text, values = f"*/{step}", set(range(low, high + 1, step))
    elif kind == "value":
        value = draw(st.integers(low, top))
        text, values = render(value), {value}
    elif kind == "list":
        chosen = draw(st.lists(st.integers(low, top), min_size=2, max_size=4))
        text, values = ",".join(render(value) for value in chosen), set(chosen)
    else:
        start = draw(st.integers(low, top))
        if kind == "a/n":
            start_value = start % 7 if weekday else start  # `7/2` is `SUN/2`
            end = high
        else:
            start_value = start
            end = draw(st.integers(start, top))
        step = draw(st.integers(1, end - start_value + 1)) if kind != "range" else 1
        if kind == "range":
            text = f"{render(start)}-{render(end)}"
        elif kind == "range_step":
            text = f"{render(start)}-{render(end)}/{step}"
        else:
            text = f"{render(start)}/{step}"
        values = set(range(start_value, end + 1, step))
    if weekday:
        values = {value % 7 for value in values}
    single_value_range = kind in ("range", "range_step") and start == end
    return Field(text, frozenset(values), single_value_range)


@st.composite
def days_of_month(draw: st.DrawFn, extensions: bool) -> DayOfMonth:
    plain = draw(plain_fields(1, 31))
    if draw(st.integers(0, 9)) == 0:
        plain = Field("?", plain.values | frozenset(range(1, 32)))
    if not extensions or draw(st.booleans()):
        return DayOfMonth(
            plain.text, plain.values, frozenset(), frozenset(), False, plain.single_value_range
        )
    extras = draw(
        st.lists(
            st.one_of(
                st.just("L"),
                st.integers(1, 5).map(lambda offset: f"L-{offset}"),
                st.integers(1, 31).map(lambda day: f"{day}W"),
                st.just("LW"),
            ),
            min_size=1,
            max_size=2,
        )
    )
    keep_plain = draw(st.booleans())
    items = ([plain.text] if keep_plain else []) + extras
    return DayOfMonth(
        text=",".join(items),
        days=plain.values if keep_plain else frozenset(),
        last_minus=frozenset(
            0 if item == "L" else int(item[2:])
            for item in extras
            if item == "L" or item.startswith("L-")
        ),
        nearest=frozenset(int(item[:-1]) for item in extras if item[:-1].isdigit()),
        last_weekday="LW" in extras,
        single_value_range=keep_plain and plain.single_value_range,
    )


@st.composite
def days_of_week(draw: st.DrawFn, extensions: bool) -> DayOfWeek:
    plain = draw(plain_fields(0, 6, WEEKDAYS, weekday=True))
    if draw(st.integers(0, 9)) == 0:
        plain = Field("?", frozenset(range(7)))
    if not extensions or draw(st.booleans()):
        return DayOfWeek(
            plain.text, plain.values, frozenset(), frozenset(), plain.single_value_range
        )

    def name(value: int) -> str:
        return WEEKDAYS[value % 7] if draw(st.booleans()) else str(value)

    nth = draw(st.lists(st.tuples(st.integers(0, 7), st.integers(1, 5)), max_size=2))
    last = draw(st.lists(st.integers(0, 7), max_size=2, min_size=0 if nth else 1))
    keep_plain = draw(st.booleans())
    items = ([plain.text] if keep_plain else []) + [f"{name(w)}#{k}" for w, k in nth]
    items += [f"{name(w)}L" for w in last]
    return DayOfWeek(
        text=",".join(items),
        weekdays=plain.values if keep_plain else frozenset(),
        nth=frozenset((w % 7, k) for w, k in nth),
        last=frozenset(w % 7 for w in last),
        single_value_range=keep_plain and plain.single_value_range,
    )


@st.composite
def expressions(
    draw: st.DrawFn,
    *,
    extensions: bool = True,
    seconds: bool | None = None,
    hours: st.SearchStrategy[Field] | None = None,
    star_days: bool = False,
) -> Expression:
    with_seconds = draw(st.booleans()) if seconds is None else seconds
    if star_days and draw(st.integers(0, 3)) > 0:
        dom = DayOfMonth("*", frozenset(range(1, 32)), frozenset(), frozenset(), False)
        dow = DayOfWeek("*", frozenset(range(7)), frozenset(), frozenset())
    else:
        dom = draw(days_of_month(extensions))
        dow = draw(days_of_week(extensions))
    return Expression(
        second=draw(plain_fields(0, 59)) if with_seconds else None,
        minute=draw(plain_fields(0, 59)),
        hour=draw(hours if hours is not None else plain_fields(0, 23)),
        dom=dom,
        month=draw(plain_fields(1, 12, MONTHS)),
        dow=dow,
    )


# Hour fields that hit the DST transition hours of the zones above.
DST_HOURS = st.one_of(
    plain_fields(0, 23),
    st.sampled_from(["1", "2", "3", "1,2", "2-3", "1-3/2", "0-4", "*/2", "*"]).map(
        lambda text: Field(text, frozenset(_expand_simple_hours(text)))
    ),
)


def _expand_simple_hours(text: str) -> set[int]:
    values: set[int] = set()
    for item in text.split(","):
        body, _, step = item.partition("/")
        if body == "*":
            low, high = 0, 23
        elif "-" in body:
            low, high = (int(part) for part in body.split("-"))
        else:
            low = high = int(body)
        values.update(range(low, high + 1, int(step or 1)))
    return values


# -- independent matcher ---------------------------------------------------------------------


def _weekday(day: date) -> int:
    return day.isoweekday() % 7  # 0 = Sunday


def _nearest_weekday(year: int, month: int, day: int, length: int) -> int | None:
    if day > length:
        return None
    weekdays = [d for d in range(1, length + 1) if date(year, month, d).weekday() < 5]
    return min(weekdays, key=lambda d: abs(d - day))


def day_matches(expression: Expression, day: date) -> bool:
    dom, dow = expression.dom, expression.dow
    length = calendar.monthrange(day.year, day.month)[1]
    by_month = (
        day.day in dom.days
        or any(day.day == length - offset for offset in dom.last_minus)
        or any(
            day.day == _nearest_weekday(day.year, day.month, target, length)
            for target in dom.nearest
        )
        or (
            dom.last_weekday
            and day.day
            == max(d for d in range(1, length + 1) if date(day.year, day.month, d).weekday() < 5)
        )
    )
    weekday = _weekday(day)
    by_week = (
        weekday in dow.weekdays
        or any(weekday == w and (day.day - 1) // 7 + 1 == k for w, k in dow.nth)
        or any(weekday == w and day.day + 7 > length for w in dow.last)
    )
    if dom.text.startswith(("*", "?")) or dow.text.startswith(("*", "?")):
        return by_month and by_week
    return by_month or by_week


def matches(expression: Expression, wall: datetime) -> bool:
    second_ok = wall.second in expression.second.values if expression.second else wall.second == 0
    return (
        second_ok
        and wall.minute in expression.minute.values
        and wall.hour in expression.hour.values
        and wall.month in expression.month.values
        and day_matches(expression, wall.date())
    )


def build(expression: Expression, timezone: str = "UTC") -> CronSchedule:
    try:
        schedule = parse_schedule(
            schedule_type="cron", expression=expression.text, timezone=timezone
        )
    except ScheduleError as error:
        # The only legitimate rejection of a drawn expression: it can never fire (30 Feb).
        assert "never fires" in error.message, (expression.text, error.message)
        assume(False)
        raise
    assert isinstance(schedule, CronSchedule)
    assert schedule.follows_wall_clock == expression.follows_wall_clock
    return schedule


MOMENTS = st.datetimes(
    min_value=datetime(1995, 1, 1),
    max_value=datetime(2055, 1, 1),
    timezones=st.just(UTC),
)


# -- properties ------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(expression=expressions(extensions=False, seconds=False), start=MOMENTS)
def test_utc_results_equal_croniter_get_next(expression: Expression, start: datetime):
    assume(not expression.has_single_value_range)
    oracle = croniter(expression.text, start)
    # croniter only ORs the day fields when neither expands to "*"; Vixie (and we) look at
    # whether the text starts with "*". Compare only where the two rules agree.
    assume((oracle.expanded[2][0] == "*") == expression.dom.text.startswith(("*", "?")))
    assume((oracle.expanded[4][0] == "*") == expression.dow.text.startswith(("*", "?")))
    schedule = build(expression)
    moment: datetime | None = start
    for _ in range(5):
        expected = oracle.get_next(datetime)
        moment = schedule.next_after(moment)
        assert moment == expected, expression.text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(expression=expressions(extensions=False, seconds=True), start=MOMENTS)
def test_utc_six_field_results_equal_croniter_seconds_first(
    expression: Expression, start: datetime
):
    assume(not expression.has_single_value_range)
    oracle = croniter(expression.text, start, second_at_beginning=True)
    assume((oracle.expanded[2][0] == "*") == expression.dom.text.startswith(("*", "?")))
    assume((oracle.expanded[4][0] == "*") == expression.dow.text.startswith(("*", "?")))
    schedule = build(expression)
    moment: datetime | None = start
    for _ in range(5):
        expected = oracle.get_next(datetime)
        moment = schedule.next_after(moment)
        assert moment == expected, expression.text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(expression=expressions(), timezone=st.sampled_from(ZONES), start=MOMENTS)
def test_next_after_is_strictly_increasing_and_every_fire_matches(
    expression: Expression, timezone: str, start: datetime
):
    schedule = build(expression, timezone)
    zone = ZoneInfo(timezone)
    moment = start
    for _ in range(8):
        fire = schedule.next_after(moment)
        if fire is None:
            break
        assert fire > moment
        assert fire.tzinfo is UTC and fire.microsecond == 0
        local = fire.astimezone(zone)
        wall = local.replace(tzinfo=None, fold=0)
        if expression.follows_wall_clock:
            assert matches(expression, wall), (expression.text, timezone, local)
        elif matches(expression, wall):
            assert local.fold == 0, (expression.text, timezone, local)  # first occurrence
        else:
            # Only allowed reason: the end of a spring-forward gap that contains a match.
            gap = local.utcoffset() - (fire - timedelta(seconds=1)).astimezone(zone).utcoffset()
            assert gap > timedelta(0), (expression.text, timezone, local)
            skipped = (wall - timedelta(seconds=s) for s in range(1, int(gap.total_seconds()) + 1))
            assert any(matches(expression, t) for t in skipped), (expression.text, local)
        moment = fire


def _reference_fires(
    expression: Expression, zone: ZoneInfo, start: datetime, end: datetime
) -> list[datetime]:
    """Minute-by-minute brute force of the DST rule (5-field expressions only)."""
    first_minute = start.replace(second=0, microsecond=0)
    count = int((end - first_minute).total_seconds() // 60) + 1
    instants = [first_minute + timedelta(minutes=index) for index in range(count)]
    fires: set[datetime] = set()
    if expression.follows_wall_clock:
        for instant in instants:
            if matches(expression, instant.astimezone(zone).replace(tzinfo=None)):
                fires.add(instant)
    else:
        wall = (start.astimezone(zone) - timedelta(hours=3)).replace(tzinfo=None, second=0)
        wall = wall.replace(microsecond=0)
        last_wall = (end.astimezone(zone) + timedelta(hours=3)).replace(tzinfo=None)
        while wall <= last_wall:
            if matches(expression, wall):
                instant = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
                if instant.astimezone(zone).replace(tzinfo=None) != wall:  # skipped wall time
                    instant = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
                    while instant.astimezone(zone).replace(tzinfo=None) <= wall:
                        instant += timedelta(minutes=1)
                fires.add(instant)
            wall += timedelta(minutes=1)
    return sorted(fire for fire in fires if start < fire <= end)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    expression=expressions(seconds=False, hours=DST_HOURS, star_days=True),
    transition=st.sampled_from(TRANSITIONS),
    offset_seconds=st.integers(-3 * 3600, 3 * 3600),
)
def test_fires_around_dst_transitions_equal_brute_force(
    expression: Expression, transition: tuple[str, datetime], offset_seconds: int
):
    timezone, instant = transition
    zone = ZoneInfo(timezone)
    start = instant + timedelta(seconds=offset_seconds)
    end = start + timedelta(hours=30)
    schedule = build(expression, timezone)
    expected = _reference_fires(expression, zone, start, end)
    assert fires_between(schedule, start=start, end=end, limit=100_000) == expected, expression.text


def test_transition_table_used_above_lists_real_dst_transitions():
    # Guards the brute-force test against silently testing quiet hours.
    for timezone, instant in TRANSITIONS:
        zone = ZoneInfo(timezone)
        before = (instant - timedelta(seconds=1)).astimezone(zone).utcoffset()
        assert before != instant.astimezone(zone).utcoffset(), (timezone, instant)


# -- robustness: arbitrary input only ever raises ScheduleError ---------------------------

CRON_ALPHABET = st.sampled_from(list("0123456789*?/-,#LW @ JANMONFRIdaily²٣\t"))


@settings(max_examples=500, deadline=None)
@given(text=st.one_of(st.text(), st.text(CRON_ALPHABET, max_size=40)))
def test_arbitrary_cron_text_is_accepted_or_rejected_with_schedule_error(text: str):
    try:
        schedule = parse_schedule(schedule_type="cron", expression=text)
    except ScheduleError as error:
        assert error.field == "schedule.expression"
        assert error.message
    else:
        fire = schedule.next_after(datetime(2024, 1, 1, tzinfo=UTC))
        assert fire is None or fire > datetime(2024, 1, 1, tzinfo=UTC)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(), st.text(st.sampled_from(list("0123456789PTWDHMSYdhms.,² ")))))
def test_arbitrary_interval_text_is_accepted_or_rejected_with_schedule_error(text: str):
    try:
        schedule = parse_schedule(schedule_type="interval", expression=text)
    except ScheduleError as error:
        assert error.field == "schedule.expression"
    else:
        fire = schedule.next_after(datetime(2024, 1, 1, tzinfo=UTC))
        assert fire is None or fire > datetime(2024, 1, 1, tzinfo=UTC)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=40))
def test_arbitrary_timezone_and_run_at_text_only_raise_schedule_error(text: str):
    for kwargs in ({"timezone": text}, {"run_at": text}):
        try:
            parse_schedule(schedule_type="once", **{"run_at": "2030-01-01T00:00", **kwargs})
        except ScheduleError as error:
            assert error.field in ("schedule.timezone", "schedule.run_at")
