"""parse_schedule validation, once/manual schedules, preview and fires_between.

Cron details live in test_schedules_cron.py, DST in test_schedules_dst.py, intervals in
test_schedules_interval.py and property tests in test_schedules_properties.py.
"""

from __future__ import annotations

import pickle
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo

import pytest

from schedules import (
    CronSchedule,
    FireTime,
    IntervalSchedule,
    ManualSchedule,
    OnceSchedule,
    Schedule,
    ScheduleError,
    fires_between,
    parse_schedule,
    preview,
)


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def once(run_at: datetime | str | None, timezone: str = "UTC") -> OnceSchedule:
    schedule = parse_schedule(schedule_type="once", run_at=run_at, timezone=timezone)
    assert isinstance(schedule, OnceSchedule)
    return schedule


# -- ScheduleError ---------------------------------------------------------------------------


def test_schedule_error_is_a_value_error_with_field_and_message():
    error = ScheduleError("boom", field="schedule.expression")
    assert isinstance(error, ValueError)
    assert (error.field, error.message) == ("schedule.expression", "boom")
    assert "schedule.expression" in str(error) and "boom" in str(error)


def test_schedule_error_survives_pickling():
    error = pickle.loads(pickle.dumps(ScheduleError("bad zone", field="schedule.timezone")))
    assert (error.field, error.message) == ("schedule.timezone", "bad zone")


# -- parse_schedule --------------------------------------------------------------------------


def test_parse_schedule_builds_each_type():
    assert isinstance(parse_schedule(schedule_type="cron", expression="* * * * *"), CronSchedule)
    assert isinstance(parse_schedule(schedule_type="interval", expression="5m"), IntervalSchedule)
    assert isinstance(parse_schedule(schedule_type="once", run_at=utc(2030, 1, 1)), OnceSchedule)
    assert isinstance(parse_schedule(schedule_type="manual"), ManualSchedule)


def test_every_schedule_type_satisfies_the_schedule_protocol():
    schedules = [
        parse_schedule(schedule_type="cron", expression="* * * * *"),
        parse_schedule(schedule_type="interval", expression="5m"),
        parse_schedule(schedule_type="once", run_at=utc(2030, 1, 1)),
        parse_schedule(schedule_type="manual"),
    ]
    for schedule in schedules:
        assert isinstance(schedule, Schedule)
        assert schedule.timezone == ZoneInfo("UTC")


@pytest.mark.parametrize("schedule_type", ["", "CRON", "daily", "rrule"])
def test_unknown_schedule_type_names_the_type_field(schedule_type: str):
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(schedule_type=schedule_type, expression="* * * * *")
    assert caught.value.field == "schedule.type"
    assert "cron, interval, once, manual" in caught.value.message


@pytest.mark.parametrize("schedule_type", ["cron", "interval", "once", "manual"])
@pytest.mark.parametrize(
    "timezone", ["Mars/Olympus_Mons", "", " UTC", "../../etc/passwd", "/etc/localtime", "America"]
)
def test_unknown_timezone_names_the_timezone_field_for_every_type(
    schedule_type: str, timezone: str
):
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(
            schedule_type=schedule_type,
            expression="5m" if schedule_type == "interval" else "* * * * *",
            timezone=timezone,
            run_at=utc(2030, 1, 1),
        )
    assert caught.value.field == "schedule.timezone"


def test_schedule_type_may_be_a_str_enum_member():
    class Kind(StrEnum):  # like Django's TextChoices
        CRON = "cron"

    assert isinstance(parse_schedule(schedule_type=Kind.CRON, expression="@daily"), CronSchedule)


def test_interval_anchor_out_of_range_names_the_anchor_field():
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(
            schedule_type="interval",
            expression="1h",
            timezone="Asia/Tokyo",
            anchor=datetime(1, 1, 1),
        )
    assert caught.value.field == "schedule.anchor"


def test_schedule_keeps_its_timezone():
    schedule = parse_schedule(
        schedule_type="cron", expression="0 9 * * *", timezone="Europe/Berlin"
    )
    assert schedule.timezone == ZoneInfo("Europe/Berlin")


def test_cron_expression_is_evaluated_in_the_given_timezone():
    schedule = parse_schedule(schedule_type="cron", expression="0 9 * * *", timezone="Asia/Tokyo")
    assert schedule.next_after(utc(2024, 1, 1)) == utc(2024, 1, 2, 0)  # 09:00 JST = 00:00 UTC


def test_cron_expression_is_required():
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(schedule_type="cron")
    assert caught.value.field == "schedule.expression"


def test_expression_is_ignored_for_once_and_manual():
    assert (
        parse_schedule(schedule_type="manual", expression="garbage").next_after(utc(2024, 1, 1))
        is None
    )
    schedule = parse_schedule(schedule_type="once", expression="garbage", run_at=utc(2030, 1, 1))
    assert schedule.next_after(utc(2024, 1, 1)) == utc(2030, 1, 1)


# -- once --------------------------------------------------------------------------------


def test_once_fires_at_run_at_then_never():
    schedule = once(utc(2030, 1, 1, 9))
    assert schedule.next_after(utc(2029, 12, 31)) == utc(2030, 1, 1, 9)
    assert schedule.next_after(utc(2030, 1, 1, 9)) is None
    assert schedule.next_after(utc(2031, 1, 1)) is None


def test_once_from_the_beginning_of_time_returns_run_at():
    assert once(utc(2030, 1, 1)).next_after(datetime.min.replace(tzinfo=UTC)) == utc(2030, 1, 1)


@pytest.mark.parametrize(
    ("run_at", "expected"),
    [
        ("2030-01-01T09:00:00+00:00", utc(2030, 1, 1, 9)),
        ("2030-01-01T09:00:00Z", utc(2030, 1, 1, 9)),
        ("2030-01-01T10:00:00+01:00", utc(2030, 1, 1, 9)),
        ("2030-01-01 09:00:00.250000+00:00", datetime(2030, 1, 1, 9, 0, 0, 250_000, tzinfo=UTC)),
        (datetime(2030, 1, 1, 10, tzinfo=ZoneInfo("Europe/Berlin")), utc(2030, 1, 1, 9)),
    ],
)
def test_once_accepts_iso_strings_and_aware_datetimes(run_at: datetime | str, expected: datetime):
    schedule = once(run_at, timezone="America/New_York")
    assert schedule.run_at == expected
    assert schedule.run_at.tzinfo is UTC


def test_once_naive_string_is_read_in_the_schedule_timezone():
    assert once("2030-01-01T09:00:00", timezone="America/New_York").run_at == utc(2030, 1, 1, 14)
    assert once("2030-07-01T09:00", timezone="Europe/Berlin").run_at == utc(2030, 7, 1, 7)


def test_once_naive_datetime_is_read_in_the_schedule_timezone():
    naive = datetime(2030, 1, 1, 9)
    assert once(naive, timezone="Asia/Tokyo").run_at == utc(2030, 1, 1, 0)


def test_once_naive_time_in_spring_forward_gap_runs_at_end_of_gap():
    assert once("2024-03-10T02:30", timezone="America/New_York").run_at == utc(2024, 3, 10, 7)


def test_once_naive_time_in_fall_back_runs_at_first_occurrence():
    assert once("2024-11-03T01:30", timezone="America/New_York").run_at == utc(2024, 11, 3, 5, 30)


@pytest.mark.parametrize(
    ("run_at", "message"),
    [
        (None, "run_at is required"),
        ("", "run_at is required"),
        ("  ", "run_at is required"),
        ("tomorrow", "invalid ISO-8601 datetime 'tomorrow'"),
        ("2030-02-30T09:00:00", "invalid ISO-8601 datetime"),
        (1_893_456_000, "must be an ISO-8601 string or a datetime"),
        ("0001-01-01T00:00:00", "out of range"),
    ],
)
def test_once_invalid_run_at_names_the_run_at_field(run_at: object, message: str):
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(schedule_type="once", run_at=run_at, timezone="Asia/Tokyo")  # type: ignore[arg-type]
    assert caught.value.field == "schedule.run_at"
    assert message in caught.value.message


# -- manual ----------------------------------------------------------------------------------


def test_manual_never_fires():
    schedule = parse_schedule(schedule_type="manual", timezone="Europe/Berlin")
    assert schedule.next_after(utc(2024, 1, 1)) is None
    assert preview(schedule, count=3, now=utc(2024, 1, 1)) == []
    assert fires_between(schedule, start=utc(2024, 1, 1), end=utc(2025, 1, 1), limit=10) == []


# -- preview ---------------------------------------------------------------------------------


def test_preview_returns_count_fires_with_utc_and_local_times():
    schedule = parse_schedule(
        schedule_type="cron", expression="0 9 * * MON-FRI", timezone="Europe/Berlin"
    )
    fires = preview(schedule, count=3, now=utc(2024, 5, 17, 12))  # Friday afternoon
    assert [fire.utc for fire in fires] == [
        utc(2024, 5, 20, 7),
        utc(2024, 5, 21, 7),
        utc(2024, 5, 22, 7),
    ]
    for fire in fires:
        assert isinstance(fire, FireTime)
        assert fire.utc.tzinfo is UTC
        assert fire.local.tzinfo == ZoneInfo("Europe/Berlin")
        assert (fire.local.hour, fire.local.minute) == (9, 0)
        assert fire.local == fire.utc


def test_preview_is_strictly_after_now():
    schedule = parse_schedule(schedule_type="cron", expression="0 * * * *")
    assert preview(schedule, count=1, now=utc(2024, 1, 1, 5))[0].utc == utc(2024, 1, 1, 6)


def test_preview_stops_early_when_the_schedule_ends():
    fires = preview(once(utc(2030, 1, 1)), count=5, now=utc(2024, 1, 1))
    assert fires == [FireTime(utc=utc(2030, 1, 1), local=utc(2030, 1, 1))]


def test_preview_of_zero_is_empty_and_negative_is_an_error():
    schedule = parse_schedule(schedule_type="cron", expression="* * * * *")
    assert preview(schedule, count=0, now=utc(2024, 1, 1)) == []
    with pytest.raises(ValueError, match="count"):
        preview(schedule, count=-1, now=utc(2024, 1, 1))


def test_preview_requires_an_aware_now():
    schedule = parse_schedule(schedule_type="cron", expression="* * * * *")
    with pytest.raises(ValueError, match="now must be a timezone-aware datetime"):
        preview(schedule, count=1, now=datetime(2024, 1, 1))


def test_preview_of_an_interval():
    schedule = parse_schedule(schedule_type="interval", expression="PT20M", anchor=utc(2024, 1, 1))
    assert [fire.utc for fire in preview(schedule, count=3, now=utc(2024, 1, 1, 0, 30))] == [
        utc(2024, 1, 1, 0, 40),
        utc(2024, 1, 1, 1, 0),
        utc(2024, 1, 1, 1, 20),
    ]


# -- fires_between ---------------------------------------------------------------------------


def test_fires_between_is_start_exclusive_and_end_inclusive():
    schedule = parse_schedule(schedule_type="cron", expression="0 * * * *")
    assert fires_between(schedule, start=utc(2024, 1, 1, 1), end=utc(2024, 1, 1, 4), limit=10) == [
        utc(2024, 1, 1, 2),
        utc(2024, 1, 1, 3),
        utc(2024, 1, 1, 4),
    ]


def test_fires_between_honours_the_limit():
    schedule = parse_schedule(schedule_type="cron", expression="* * * * * *")
    fires = fires_between(schedule, start=utc(2024, 1, 1), end=utc(2024, 1, 2), limit=5)
    assert fires == [utc(2024, 1, 1) + timedelta(seconds=index) for index in range(1, 6)]
    assert fires_between(schedule, start=utc(2024, 1, 1), end=utc(2024, 1, 2), limit=0) == []


def test_fires_between_with_an_empty_or_reversed_window():
    schedule = parse_schedule(schedule_type="cron", expression="0 0 * * *")
    assert fires_between(schedule, start=utc(2024, 1, 1, 1), end=utc(2024, 1, 1, 23), limit=9) == []
    assert fires_between(schedule, start=utc(2024, 1, 5), end=utc(2024, 1, 1), limit=9) == []


def test_fires_between_once_and_interval():
    assert fires_between(
        once(utc(2030, 1, 1)), start=utc(2029, 1, 1), end=utc(2031, 1, 1), limit=10
    ) == [utc(2030, 1, 1)]
    schedule = parse_schedule(schedule_type="interval", expression="1d", anchor=utc(2024, 1, 1))
    assert fires_between(schedule, start=utc(2024, 1, 1), end=utc(2024, 1, 3), limit=10) == [
        utc(2024, 1, 2),
        utc(2024, 1, 3),
    ]


def test_fires_between_negative_limit_is_an_error():
    schedule = parse_schedule(schedule_type="manual")
    with pytest.raises(ValueError, match="limit"):
        fires_between(schedule, start=utc(2024, 1, 1), end=utc(2024, 1, 2), limit=-1)
