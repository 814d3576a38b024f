"""Cron syntax and evaluation on the UTC wall clock (no DST; see test_schedules_dst.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from schedules import (
    CronSchedule,
    ScheduleError,
    compile_cron,
    parse_schedule,
)


def utc(*parts: int, microsecond: int = 0) -> datetime:
    return datetime(*parts, microsecond=microsecond, tzinfo=UTC)


def cron(expression: str, timezone: str = "UTC") -> CronSchedule:
    schedule = parse_schedule(schedule_type="cron", expression=expression, timezone=timezone)
    assert isinstance(schedule, CronSchedule)
    return schedule


def fires(expression: str, after: datetime, count: int, timezone: str = "UTC") -> list[datetime]:
    schedule = cron(expression, timezone)
    result: list[datetime] = []
    moment: datetime | None = after
    for _ in range(count):
        moment = schedule.next_after(moment)
        assert moment is not None
        result.append(moment)
    return result


# -- basics ----------------------------------------------------------------------------------


def test_five_field_expression_fires_at_minute_and_hour():
    assert fires("30 2 * * *", utc(2024, 5, 17, 13, 37), 2) == [
        utc(2024, 5, 18, 2, 30),
        utc(2024, 5, 19, 2, 30),
    ]


def test_next_after_is_strictly_after_a_fire_time():
    assert cron("30 2 * * *").next_after(utc(2024, 5, 18, 2, 30)) == utc(2024, 5, 19, 2, 30)


def test_next_after_with_microseconds_rounds_up_to_the_next_second():
    moment = utc(2024, 5, 18, 2, 29, 59, microsecond=500_000)
    assert cron("30 2 * * *").next_after(moment) == utc(2024, 5, 18, 2, 30)


def test_result_is_aware_utc_for_any_aware_input():
    moment = datetime(2024, 5, 18, 4, 29, tzinfo=ZoneInfo("Europe/Berlin"))  # 02:29 UTC
    result = cron("30 2 * * *").next_after(moment)
    assert result == utc(2024, 5, 18, 2, 30)
    assert result is not None and result.tzinfo is UTC


def test_naive_moment_is_rejected():
    with pytest.raises(ValueError, match="timezone-aware"):
        cron("* * * * *").next_after(datetime(2024, 1, 1))


def test_every_minute_rolls_over_hour_day_month_and_year():
    assert fires("* * * * *", utc(2024, 12, 31, 23, 59), 1) == [utc(2025, 1, 1, 0, 0)]


def test_five_field_expressions_fire_on_second_zero():
    assert fires("* * * * *", utc(2024, 1, 1, 0, 0, 1), 1) == [utc(2024, 1, 1, 0, 1)]


# -- seconds ---------------------------------------------------------------------------------


def test_six_field_expression_has_seconds_first():
    assert fires("*/10 * * * * *", utc(2024, 1, 1, 12, 0, 5), 3) == [
        utc(2024, 1, 1, 12, 0, 10),
        utc(2024, 1, 1, 12, 0, 20),
        utc(2024, 1, 1, 12, 0, 30),
    ]


def test_seconds_field_carries_into_the_minute():
    assert fires("*/10 * * * * *", utc(2024, 1, 1, 12, 0, 50), 2) == [
        utc(2024, 1, 1, 12, 1, 0),
        utc(2024, 1, 1, 12, 1, 10),
    ]


def test_six_field_expression_with_fixed_second_minute_hour():
    assert fires("30 15 10 * * *", utc(2024, 1, 1, 10, 15, 30), 1) == [utc(2024, 1, 2, 10, 15, 30)]


def test_seconds_list_and_range():
    assert fires("5,50-52 0 0 * * *", utc(2024, 1, 1), 5) == [
        utc(2024, 1, 1, 0, 0, 5),
        utc(2024, 1, 1, 0, 0, 50),
        utc(2024, 1, 1, 0, 0, 51),
        utc(2024, 1, 1, 0, 0, 52),
        utc(2024, 1, 2, 0, 0, 5),
    ]


# -- lists, ranges, steps, names -----------------------------------------------------------


def test_step_range_and_list_combination():
    # minutes {5, 10, 15, 20, 45}, hours {0, 6, 12, 18}
    assert fires("5-20/5,45 */6 * * *", utc(2024, 1, 1, 6, 20), 3) == [
        utc(2024, 1, 1, 6, 45),
        utc(2024, 1, 1, 12, 5),
        utc(2024, 1, 1, 12, 10),
    ]


def test_start_slash_step_runs_to_the_field_maximum():
    assert fires("10/20 * * * *", utc(2024, 1, 1, 0, 0), 4) == [
        utc(2024, 1, 1, 0, 10),
        utc(2024, 1, 1, 0, 30),
        utc(2024, 1, 1, 0, 50),
        utc(2024, 1, 1, 1, 10),
    ]


def test_hour_range_business_hours_on_weekdays():
    # 2024-01-05 is a Friday: after 17:00 the next run is Monday 09:00.
    assert fires("0 9-17 * * 1-5", utc(2024, 1, 5, 17, 0), 2) == [
        utc(2024, 1, 8, 9, 0),
        utc(2024, 1, 8, 10, 0),
    ]


def test_month_and_weekday_names_case_insensitive():
    expected = [utc(2024, 7, 1, 12), utc(2024, 7, 2, 12)]  # 2024-07-01 is a Monday
    assert fires("0 12 * JAN,JUL MON-FRI", utc(2024, 6, 15), 2) == expected
    assert fires("0 12 * jan,jul mon-fri", utc(2024, 6, 15), 2) == expected


def test_sunday_is_zero_or_seven():
    expected = [utc(2024, 1, 7), utc(2024, 1, 14)]  # 2024-01-01 is a Monday
    for expression in ("0 0 * * 0", "0 0 * * 7", "0 0 * * SUN"):
        assert fires(expression, utc(2024, 1, 1), 2) == expected, expression


def test_weekday_range_ending_at_seven_includes_sunday():
    # Friday 5th, Saturday 6th, Sunday 7th, then Friday 12th.
    assert fires("0 0 * * 5-7", utc(2024, 1, 4), 4) == [
        utc(2024, 1, 5),
        utc(2024, 1, 6),
        utc(2024, 1, 7),
        utc(2024, 1, 12),
    ]


def test_question_mark_is_a_wildcard():
    assert fires("0 0 ? * MON", utc(2024, 1, 1), 2) == fires("0 0 * * MON", utc(2024, 1, 1), 2)


def test_months_skip_to_the_next_allowed_year():
    assert fires("0 0 1 3,6 *", utc(2024, 6, 1), 2) == [utc(2025, 3, 1), utc(2025, 6, 1)]


def test_day_31_skips_short_months():
    assert fires("0 0 31 * *", utc(2024, 3, 31), 2) == [utc(2024, 5, 31), utc(2024, 7, 31)]


def test_february_29_waits_for_the_next_leap_year():
    assert fires("0 0 29 2 *", utc(2024, 3, 1), 1) == [utc(2028, 2, 29)]


def test_fifth_monday_of_february_is_found_decades_ahead():
    # Only a leap February starting on a Monday has five Mondays: 2016, then 2044.
    assert fires("0 0 * 2 1#5", utc(2016, 3, 1), 1) == [utc(2044, 2, 29)]


def test_no_fire_after_year_9999_returns_none():
    assert cron("0 0 1 1 *").next_after(utc(9999, 6, 1)) is None


def test_moment_at_datetime_max_returns_none():
    assert cron("* * * * * *").next_after(datetime.max.replace(tzinfo=UTC)) is None
    assert cron("* * * * * *", "Asia/Tokyo").next_after(datetime.max.replace(tzinfo=UTC)) is None


def test_moment_at_datetime_min_is_supported_in_zones_west_of_utc():
    result = cron("0 0 * * *", "America/New_York").next_after(datetime.min.replace(tzinfo=UTC))
    assert result is not None and result.year == 1


# -- day-of-month / day-of-week semantics ---------------------------------------------------


def test_dom_and_dow_both_restricted_means_either_vixie_or():
    # "the 13th, or any Friday": Jan 2024 Fridays are 5, 12, 19; the 13th is a Saturday.
    assert fires("0 0 13 * 5", utc(2024, 1, 1), 4) == [
        utc(2024, 1, 5),
        utc(2024, 1, 12),
        utc(2024, 1, 13),
        utc(2024, 1, 19),
    ]


def test_dom_star_step_makes_days_and_weekdays_both_required():
    # Vixie: a day field starting with `*` sets DOM_STAR, so `*/2` + Monday = odd Mondays.
    assert fires("0 0 */2 * 1", utc(2023, 12, 31), 5) == [
        utc(2024, 1, 1),
        utc(2024, 1, 15),
        utc(2024, 1, 29),
        utc(2024, 2, 5),
        utc(2024, 2, 19),
    ]


def test_dow_star_means_only_dom_counts():
    assert fires("0 0 15 * *", utc(2024, 1, 1), 2) == [utc(2024, 1, 15), utc(2024, 2, 15)]


# -- L, W, #, last weekday -----------------------------------------------------------------


def test_last_day_of_month_across_31_30_and_february_leap():
    assert fires("0 0 L * *", utc(2024, 1, 15), 6) == [
        utc(2024, 1, 31),
        utc(2024, 2, 29),
        utc(2024, 3, 31),
        utc(2024, 4, 30),
        utc(2024, 5, 31),
        utc(2024, 6, 30),
    ]


def test_last_day_of_february_in_non_leap_and_leap_years():
    assert fires("0 0 L 2 *", utc(2023, 1, 1), 3) == [
        utc(2023, 2, 28),
        utc(2024, 2, 29),
        utc(2025, 2, 28),
    ]


def test_last_day_of_30_day_months():
    assert fires("0 0 L 4,6,9,11 *", utc(2024, 1, 1), 4) == [
        utc(2024, 4, 30),
        utc(2024, 6, 30),
        utc(2024, 9, 30),
        utc(2024, 11, 30),
    ]


def test_last_day_minus_offset():
    assert fires("0 0 L-2 * *", utc(2024, 1, 1), 3) == [
        utc(2024, 1, 29),
        utc(2024, 2, 27),
        utc(2024, 3, 29),
    ]


def test_last_day_combined_with_a_list():
    assert fires("0 0 1,L * *", utc(2024, 2, 1), 3) == [
        utc(2024, 2, 29),
        utc(2024, 3, 1),
        utc(2024, 3, 31),
    ]


def test_last_weekday_of_month_lw():
    # 2024-03-31 is a Sunday -> Fri 29th; 2024-04-30 is a Tuesday; 2024-06-30 Sunday -> 28th;
    # 2024-08-31 is a Saturday -> Fri 30th.
    assert fires("0 0 LW * *", utc(2024, 3, 1), 6) == [
        utc(2024, 3, 29),
        utc(2024, 4, 30),
        utc(2024, 5, 31),
        utc(2024, 6, 28),
        utc(2024, 7, 31),
        utc(2024, 8, 30),
    ]


def test_nearest_weekday_w_moves_weekend_days_inside_the_month():
    # 2024-06-15 Saturday -> Fri 14th; 2024-09-15 Sunday -> Mon 16th.
    assert cron("0 0 15W * *").next_after(utc(2024, 6, 1)) == utc(2024, 6, 14)
    assert cron("0 0 15W * *").next_after(utc(2024, 9, 1)) == utc(2024, 9, 16)
    # 2024-06-01 Saturday -> Mon 3rd (not back into May); 2024-09-01 Sunday -> Mon 2nd.
    assert cron("0 0 1W * *").next_after(utc(2024, 5, 31)) == utc(2024, 6, 3)
    assert cron("0 0 1W * *").next_after(utc(2024, 8, 31)) == utc(2024, 9, 2)
    # 2024-06-30 Sunday is the last day -> Fri 28th (not forward into July).
    assert cron("0 0 30W * *").next_after(utc(2024, 6, 1)) == utc(2024, 6, 28)


def test_nearest_weekday_of_a_day_the_month_lacks_does_not_fire():
    # April and June have no 31st; 2024-05-31 is a Friday.
    assert fires("0 0 31W * *", utc(2024, 4, 1), 2) == [utc(2024, 5, 31), utc(2024, 7, 31)]


def test_nth_weekday_hash():
    expected = [utc(2024, 1, 8), utc(2024, 2, 12), utc(2024, 3, 11)]  # second Mondays
    assert fires("0 0 * * 1#2", utc(2024, 1, 1), 3) == expected
    assert fires("0 0 * * MON#2", utc(2024, 1, 1), 3) == expected


def test_fifth_weekday_hash_skips_months_without_one():
    assert fires("0 0 * * 5#5", utc(2024, 1, 1), 4) == [
        utc(2024, 3, 29),
        utc(2024, 5, 31),
        utc(2024, 8, 30),
        utc(2024, 11, 29),
    ]


def test_last_weekday_of_month_nl():
    expected = [utc(2024, 1, 26), utc(2024, 2, 23), utc(2024, 3, 29)]  # last Fridays
    assert fires("0 0 * * 5L", utc(2024, 1, 1), 3) == expected
    assert fires("0 0 * * FRIL", utc(2024, 1, 1), 3) == expected


def test_last_sunday_of_month_with_seven_or_zero():
    assert fires("0 1 * 3 7L", utc(2024, 1, 1), 1) == [utc(2024, 3, 31, 1)]
    assert fires("0 1 * 3 0L", utc(2024, 1, 1), 1) == [utc(2024, 3, 31, 1)]


def test_hash_and_last_combined_with_dom_use_or():
    # 1st of the month, or the last Friday.
    assert fires("0 0 1 * 5L", utc(2024, 1, 1), 3) == [
        utc(2024, 1, 26),
        utc(2024, 2, 1),
        utc(2024, 2, 23),
    ]


# -- macros ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("macro", "expected"),
    [
        ("@hourly", utc(2024, 5, 17, 14)),
        ("@daily", utc(2024, 5, 18)),
        ("@midnight", utc(2024, 5, 18)),
        ("@weekly", utc(2024, 5, 19)),  # next Sunday
        ("@monthly", utc(2024, 6, 1)),
        ("@yearly", utc(2025, 1, 1)),
        ("@annually", utc(2025, 1, 1)),
        ("@DAILY", utc(2024, 5, 18)),
    ],
)
def test_macros(macro: str, expected: datetime):
    assert cron(macro).next_after(utc(2024, 5, 17, 13, 37)) == expected


def test_hourly_macro_follows_the_wall_clock_and_daily_is_fixed_hour():
    assert cron("@hourly").follows_wall_clock
    assert not cron("@daily").follows_wall_clock


# -- invalid expressions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("", "cron expression is required"),
        ("   ", "cron expression is required"),
        ("* * * *", "expected 5 fields"),
        ("abc", "expected 5 fields"),
        ("* * * * * * *", "7 fields (a year field) are not supported"),
        ("61 * * * *", "minute field value 61 out of range 0-59"),
        ("* 24 * * *", "hour field value 24 out of range 0-23"),
        ("* * 0 * *", "day-of-month field value 0 out of range 1-31"),
        ("* * 32 * *", "day-of-month field value 32 out of range 1-31"),
        ("* * * 13 *", "month field value 13 out of range 1-12"),
        ("* * * 0 *", "month field value 0 out of range 1-12"),
        ("* * * * 8", "day-of-week field value 8 out of range 0-7"),
        ("60 * * * * *", "second field value 60 out of range 0-59"),
        ("*/0 * * * *", "minute field: step must be a positive integer, got '0'"),
        ("*/x * * * *", "minute field: step must be a positive integer"),
        ("30-10 * * * *", "minute field: range 30-10 is reversed"),
        ("* * * FOO *", "month field: unknown name 'FOO'"),
        ("* JAN * * *", "hour field: invalid value 'JAN'"),
        ("1,,2 * * * *", "minute field '1,,2' has an empty list item"),
        ("* * * * 1#6", "'#6' must be a number 1-5"),
        ("* * * * 1#", "'#' must be a number 1-5"),
        ("* * * * L", "'L' needs a weekday"),
        ("* * 5X * *", "day-of-month field: invalid value '5X'"),
        ("* * L-31 * *", "L-31 offset out of range 0-30"),
        ("* * 32W * *", "day-of-month field value 32 out of range 1-31"),
        ("* * W * *", "day-of-month field: invalid item 'W'"),
        ("* * * * MON-", "day-of-week field: invalid item 'MON-'"),
        ("*-5 * * * *", "minute field: invalid item '*-5'"),
        ("0 0 30 2 *", "expression never fires: no day in February"),
        ("0 0 31 4,6 *", "expression never fires: no day in April, June"),
        ("@reboot", "@reboot is not a time-based schedule"),
        ("@every 5m", "unknown macro '@every 5m'"),
    ],
)
def test_invalid_expression_names_the_field_and_the_problem(expression: str, message: str):
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(schedule_type="cron", expression=expression)
    assert caught.value.field == "schedule.expression"
    assert message in caught.value.message


def test_february_29_alone_is_valid_because_leap_years_exist():
    assert cron("0 0 29 2 *").next_after(utc(2023, 1, 1)) == utc(2024, 2, 29)


# -- compilation -----------------------------------------------------------------------------


def test_compiled_expressions_are_cached_and_shared():
    assert compile_cron("7 7 * * *") is compile_cron("7 7 * * *")
    assert cron("7 7 * * *").cron is cron("7 7 * * *").cron


def test_compiled_matches_checks_a_wall_time():
    compiled = compile_cron("0 0 * * 5L")
    assert compiled.matches(datetime(2024, 1, 26))
    assert not compiled.matches(datetime(2024, 1, 19))


def test_cron_schedules_compare_by_expression_and_zone():
    assert cron("0 0 * * *") == cron("0 0 * * *")
    assert cron("0 0 * * *") != cron("0 0 * * *", "Europe/Berlin")
    assert hash(cron("0 0 * * *")) == hash(cron("0 0 * * *"))


def test_long_search_is_not_a_minute_by_minute_scan():
    schedule = cron("0 0 29 2 1#5")  # OR: Feb 29, or the 5th Monday of any month
    start = utc(2024, 3, 1)
    # A minute-by-minute walk would take seconds; the compiled walk is immediate.
    moment = start
    for _ in range(200):
        next_moment = schedule.next_after(moment)
        assert next_moment is not None and next_moment > moment
        moment = next_moment
    assert moment - start > timedelta(days=365 * 10)
