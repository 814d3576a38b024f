"""Interval schedules: parsing every accepted format and the anchor arithmetic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from schedules import (
    IntervalSchedule,
    ScheduleError,
    parse_interval,
    parse_schedule,
    preview,
)


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def interval(
    expression: str, anchor: datetime | None = None, timezone: str = "UTC"
) -> IntervalSchedule:
    schedule = parse_schedule(
        schedule_type="interval", expression=expression, timezone=timezone, anchor=anchor
    )
    assert isinstance(schedule, IntervalSchedule)
    return schedule


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("1s", timedelta(seconds=1)),
        ("5m", timedelta(minutes=5)),
        ("2h", timedelta(hours=2)),
        ("1d", timedelta(days=1)),
        ("2w", timedelta(weeks=2)),
        ("1h30m", timedelta(minutes=90)),
        ("1d2h3m4s", timedelta(days=1, hours=2, minutes=3, seconds=4)),
        ("1h 30m", timedelta(minutes=90)),
        (" 45s ", timedelta(seconds=45)),
        ("5M", timedelta(minutes=5)),
        ("90m", timedelta(minutes=90)),
        ("PT30S", timedelta(seconds=30)),
        ("PT5M", timedelta(minutes=5)),
        ("PT1H30M", timedelta(minutes=90)),
        ("P1D", timedelta(days=1)),
        ("P1DT2H", timedelta(days=1, hours=2)),
        ("P2W", timedelta(weeks=2)),
        ("pt15m", timedelta(minutes=15)),
        ("PT1.5S", timedelta(seconds=1.5)),
        ("PT0,5M", timedelta(seconds=30)),
    ],
)
def test_parse_interval_accepts(text: str, expected: timedelta):
    assert parse_interval(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "interval is required"),
        ("   ", "interval is required"),
        ("30", "interval '30' is missing a unit"),
        ("5x", "unknown unit 'x'"),
        ("5 minutes", "unknown unit 'minutes'"),
        ("30m1h", "each unit may appear once, largest first"),
        ("1h1h", "each unit may appear once, largest first"),
        ("1.5h", "invalid interval '1.5h'"),
        ("-5m", "invalid interval '-5m'"),
        ("abc", "invalid interval 'abc'"),
        ("0s", "interval must be at least 1 second"),
        ("0h0m", "interval must be at least 1 second"),
        ("PT0.5S", "interval must be at least 1 second"),
        ("PT0S", "interval must be at least 1 second"),
        ("P1M", "years and months are not supported"),
        ("P1Y", "years and months are not supported"),
        ("P1YT1H", "years and months are not supported"),
        ("P", "invalid ISO-8601 duration 'P'"),
        ("PT", "invalid ISO-8601 duration 'PT'"),
        ("P1DT", "invalid ISO-8601 duration 'P1DT'"),
        ("PT5H1D", "invalid ISO-8601 duration 'PT5H1D'"),
        ("P5", "invalid ISO-8601 duration 'P5'"),
        ("99999999999d", "is too large"),
    ],
)
def test_parse_interval_rejects_with_a_clear_message(text: str, message: str):
    with pytest.raises(ScheduleError) as caught:
        parse_interval(text)
    assert caught.value.field == "schedule.expression"
    assert message in caught.value.message


def test_invalid_interval_through_parse_schedule_names_the_expression_field():
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(schedule_type="interval", expression="soon")
    assert caught.value.field == "schedule.expression"


def test_interval_without_anchor_is_aligned_to_the_unix_epoch():
    assert interval("1h").next_after(utc(2024, 5, 17, 13, 37)) == utc(2024, 5, 17, 14)
    # 90 minutes since 1970-01-01 00:00 UTC: 2024-05-17 12:00 is a multiple (5400 s).
    assert interval("90m").next_after(utc(2024, 5, 17, 12)) == utc(2024, 5, 17, 13, 30)


def test_interval_fires_at_anchor_plus_multiples_of_the_period():
    schedule = interval("30s", anchor=utc(2024, 1, 1, 0, 0, 10))
    assert schedule.next_after(utc(2024, 1, 1, 0, 5)) == utc(2024, 1, 1, 0, 5, 10)
    assert schedule.next_after(utc(2024, 1, 1, 0, 5, 10)) == utc(2024, 1, 1, 0, 5, 40)


def test_interval_before_the_anchor_fires_first_at_the_anchor():
    schedule = interval("1h", anchor=utc(2024, 1, 1, 12))
    assert schedule.next_after(utc(2023, 12, 25)) == utc(2024, 1, 1, 12)
    assert schedule.next_after(utc(2024, 1, 1, 12)) == utc(2024, 1, 1, 13)


def test_interval_anchor_with_microseconds_keeps_exact_arithmetic():
    anchor = datetime(2024, 1, 1, 0, 0, 0, 250_000, tzinfo=UTC)
    schedule = interval("PT1.5S", anchor=anchor)
    assert schedule.next_after(anchor + timedelta(seconds=3)) == anchor + timedelta(seconds=4.5)


def test_interval_anchor_in_another_zone_is_the_same_instant():
    anchor = datetime(2024, 1, 1, 1, 0, tzinfo=ZoneInfo("Europe/Berlin"))  # 00:00 UTC
    assert interval("1d", anchor=anchor).next_after(utc(2024, 1, 5, 12)) == utc(2024, 1, 6)


def test_interval_naive_anchor_is_read_in_the_schedule_timezone():
    anchor = datetime(2024, 1, 1, 9, 0)
    schedule = interval("1d", anchor=anchor, timezone="America/New_York")
    assert schedule.anchor == utc(2024, 1, 1, 14)


def test_interval_is_an_exact_duration_not_wall_clock_across_dst():
    # Hourly in UTC terms across the New York fall-back: 3 fires in 3 real hours.
    schedule = interval("1h", timezone="America/New_York")
    fires = [fire.utc for fire in preview(schedule, count=3, now=utc(2024, 11, 3, 4, 30))]
    assert fires == [utc(2024, 11, 3, 5), utc(2024, 11, 3, 6), utc(2024, 11, 3, 7)]
    # A 1d interval anchored at local midnight drifts to 01:00 local after spring forward.
    daily = interval("1d", anchor=utc(2024, 3, 9, 5), timezone="America/New_York")
    [fire] = preview(daily, count=1, now=utc(2024, 3, 10, 12))
    assert fire.utc == utc(2024, 3, 11, 5)
    assert fire.local.hour == 1


def test_interval_timezone_is_validated_and_stored():
    assert interval("5m", timezone="Asia/Tokyo").timezone == ZoneInfo("Asia/Tokyo")
    with pytest.raises(ScheduleError) as caught:
        interval("5m", timezone="Nowhere/Special")
    assert caught.value.field == "schedule.timezone"


def test_interval_near_datetime_max_returns_none():
    assert interval("1d").next_after(datetime.max.replace(tzinfo=UTC)) is None


def test_interval_schedule_rejects_sub_second_periods_directly():
    with pytest.raises(ValueError, match="at least 1 second"):
        IntervalSchedule(timedelta(milliseconds=10), utc(2024, 1, 1), ZoneInfo("UTC"))
