"""The DST invariant (Vixie cron's rule), pinned with exact UTC instants.

2024 transitions used here:
  America/New_York  spring 2024-03-10 07:00 UTC: 02:00 EST -> 03:00 EDT (02:xx does not exist)
                    fall   2024-11-03 06:00 UTC: 02:00 EDT -> 01:00 EST (01:xx happens twice)
  Europe/Berlin     spring 2024-03-31 01:00 UTC: 02:00 CET  -> 03:00 CEST
                    fall   2024-10-27 01:00 UTC: 03:00 CEST -> 02:00 CET  (02:xx happens twice)

Minute and hour fields both fixed (neither starts with `*`): a skipped time fires once at the
end of the gap, a repeated time fires once at its first occurrence. Minute or hour field
starting with `*` (Vixie's MIN_STAR|HR_STAR): follow the wall clock (nothing in the skipped
hour, both occurrences of the repeated hour).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from schedules import Schedule, fires_between, parse_schedule, preview

NEW_YORK = "America/New_York"
BERLIN = "Europe/Berlin"


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def cron(expression: str, timezone: str) -> Schedule:
    return parse_schedule(schedule_type="cron", expression=expression, timezone=timezone)


def fires(expression: str, timezone: str, after: datetime, count: int) -> list[datetime]:
    return [fire.utc for fire in preview(cron(expression, timezone), count=count, now=after)]


def fires_on_local_day(expression: str, timezone: str, day: datetime) -> list[datetime]:
    """Every fire whose wall-clock date is `day` (a naive date at midnight) in `timezone`."""
    zone = ZoneInfo(timezone)
    start = day.replace(tzinfo=zone).astimezone(UTC) - timedelta(seconds=1)
    end = (day + timedelta(days=1)).replace(tzinfo=zone).astimezone(UTC) - timedelta(seconds=1)
    return fires_between(cron(expression, timezone), start=start, end=end, limit=10_000)


def hourly_utc(first: datetime, count: int) -> list[datetime]:
    return [first + timedelta(hours=index) for index in range(count)]


# -- fixed hour: spring forward --------------------------------------------------------------


def test_spring_forward_fixed_hour_fires_at_end_of_gap():
    # 02:30 does not exist on 2024-03-10 in New York: fire at 03:00 EDT = 07:00 UTC.
    assert fires("30 2 * * *", NEW_YORK, utc(2024, 3, 9, 12), 3) == [
        utc(2024, 3, 10, 7, 0),
        utc(2024, 3, 11, 6, 30),
        utc(2024, 3, 12, 6, 30),
    ]


def test_spring_forward_fixed_hour_fires_at_end_of_gap_berlin():
    # 02:30 does not exist on 2024-03-31 in Berlin: fire at 03:00 CEST = 01:00 UTC.
    assert fires("30 2 * * *", BERLIN, utc(2024, 3, 30, 12), 3) == [
        utc(2024, 3, 31, 1, 0),
        utc(2024, 4, 1, 0, 30),
        utc(2024, 4, 2, 0, 30),
    ]


def test_spring_forward_gap_fire_shows_local_time_after_the_gap():
    [fire] = preview(cron("30 2 * * *", NEW_YORK), count=1, now=utc(2024, 3, 9, 12))
    assert fire.utc == utc(2024, 3, 10, 7)
    assert (fire.local.hour, fire.local.minute) == (3, 0)
    assert fire.local.utcoffset() == timedelta(hours=-4)


def test_spring_forward_matches_in_one_gap_collapse_into_a_single_fire():
    # 02:00, 02:15, 02:30, 02:45 are all skipped: one fire at 03:00 EDT, then normal days.
    assert fires("0,15,30,45 2 * * *", NEW_YORK, utc(2024, 3, 9, 8), 4) == [
        utc(2024, 3, 10, 7, 0),
        utc(2024, 3, 11, 6, 0),
        utc(2024, 3, 11, 6, 15),
        utc(2024, 3, 11, 6, 30),
    ]


def test_spring_forward_gap_fire_and_real_3am_match_fire_once():
    # 02:00/02:30 collapse onto 03:00 EDT, which the expression matches anyway: one fire.
    assert fires("0,30 2,3 * * *", NEW_YORK, utc(2024, 3, 10, 6), 3) == [
        utc(2024, 3, 10, 7, 0),
        utc(2024, 3, 10, 7, 30),
        utc(2024, 3, 11, 6, 0),
    ]


def test_spring_forward_fixed_hour_just_before_and_at_the_gap_end():
    schedule = cron("30 2 * * *", NEW_YORK)
    assert schedule.next_after(utc(2024, 3, 10, 6, 59, 59)) == utc(2024, 3, 10, 7)
    assert schedule.next_after(utc(2024, 3, 10, 7)) == utc(2024, 3, 11, 6, 30)


def test_spring_forward_fixed_hour_range_is_unaffected_outside_the_gap():
    # 09:00-17:00 on the transition day are ordinary EDT times.
    day = fires_on_local_day("0 9-17 * * *", NEW_YORK, datetime(2024, 3, 10))
    assert day == hourly_utc(utc(2024, 3, 10, 13), 9)


# -- fixed hour: fall back -------------------------------------------------------------------


def test_fall_back_fixed_hour_fires_once():
    # 01:30 happens twice on 2024-11-03 in New York: only the first (EDT, 05:30 UTC) fires.
    assert fires("30 1 * * *", NEW_YORK, utc(2024, 11, 3), 2) == [
        utc(2024, 11, 3, 5, 30),
        utc(2024, 11, 4, 6, 30),
    ]


def test_fall_back_fixed_hour_fires_once_berlin():
    # 02:30 happens twice on 2024-10-27 in Berlin: only the first (CEST, 00:30 UTC) fires.
    assert fires("30 2 * * *", BERLIN, utc(2024, 10, 26, 12), 2) == [
        utc(2024, 10, 27, 0, 30),
        utc(2024, 10, 28, 1, 30),
    ]


def test_fall_back_fixed_hour_from_inside_the_repeated_hour_waits_for_tomorrow():
    schedule = cron("30 1 * * *", NEW_YORK)
    assert schedule.next_after(utc(2024, 11, 3, 5, 45)) == utc(2024, 11, 4, 6, 30)  # 1st pass
    assert schedule.next_after(utc(2024, 11, 3, 6, 10)) == utc(2024, 11, 4, 6, 30)  # 2nd pass


def test_fall_back_fixed_hour_and_fixed_minutes_fire_only_in_first_pass():
    day = fires_on_local_day("0,30 1 * * *", NEW_YORK, datetime(2024, 11, 3))
    assert day == [utc(2024, 11, 3, 5, 0), utc(2024, 11, 3, 5, 30)]


def test_fall_back_fixed_hour_every_second_skips_the_whole_second_pass():
    schedule = cron("* 0-59 1 * * *", NEW_YORK)
    # 01:59:59 EDT -> next is 01:00:00 EST on the *next* day, not the repeated hour.
    assert schedule.next_after(utc(2024, 11, 3, 5, 59, 59)) == utc(2024, 11, 4, 6)
    assert schedule.next_after(utc(2024, 11, 3, 6, 30)) == utc(2024, 11, 4, 6)
    assert len(fires_on_local_day("0-59 1 * * *", NEW_YORK, datetime(2024, 11, 3))) == 60


# -- wildcard minute, fixed hour: Vixie's MIN_STAR makes it a wall-clock ("wildcard") job -----


def test_minute_wildcard_with_fixed_hour_fires_in_both_passes_of_the_fall_back_hour():
    # Vixie fires `*/15 1 * * *` 8 times on the fall-back day: 01:xx EDT and 01:xx EST.
    day = fires_on_local_day("*/15 1 * * *", NEW_YORK, datetime(2024, 11, 3))
    first_pass = [utc(2024, 11, 3, 5, 15 * index) for index in range(4)]
    second_pass = [utc(2024, 11, 3, 6, 15 * index) for index in range(4)]
    assert day == first_pass + second_pass


def test_minute_wildcard_with_fixed_hour_does_not_fire_on_the_spring_forward_day():
    # 02:xx does not exist on 2024-03-10 in New York; Vixie runs no wildcard job for
    # skipped minutes, so `* 2 * * *` fires none that day (not once at 03:00).
    assert fires_on_local_day("* 2 * * *", NEW_YORK, datetime(2024, 3, 10)) == []
    assert fires("*/15 2 * * *", NEW_YORK, utc(2024, 3, 9, 8), 2) == [
        utc(2024, 3, 11, 6, 0),
        utc(2024, 3, 11, 6, 15),
    ]


def test_minute_wildcard_with_fixed_hour_is_an_ordinary_day_elsewhere():
    day = fires_on_local_day("*/15 1 * * *", NEW_YORK, datetime(2024, 11, 4))
    assert day == [utc(2024, 11, 4, 6, 15 * index) for index in range(4)]


# -- wildcard hour: wall clock ---------------------------------------------------------------


def test_hourly_fires_25_times_on_fall_back_day():
    day = fires_on_local_day("0 * * * *", NEW_YORK, datetime(2024, 11, 3))
    assert day == hourly_utc(utc(2024, 11, 3, 4), 25)
    local_hours = [fire.astimezone(ZoneInfo(NEW_YORK)).hour for fire in day]
    assert local_hours == [0, 1, 1, *range(2, 24)]


def test_hourly_fires_23_times_on_spring_forward_day():
    day = fires_on_local_day("0 * * * *", NEW_YORK, datetime(2024, 3, 10))
    assert day == hourly_utc(utc(2024, 3, 10, 5), 23)
    local_hours = [fire.astimezone(ZoneInfo(NEW_YORK)).hour for fire in day]
    assert local_hours == [0, 1, *range(3, 24)]


def test_hourly_fires_25_times_on_fall_back_day_berlin():
    day = fires_on_local_day("0 * * * *", BERLIN, datetime(2024, 10, 27))
    assert day == hourly_utc(utc(2024, 10, 26, 22), 25)


def test_hourly_fires_23_times_on_spring_forward_day_berlin():
    day = fires_on_local_day("0 * * * *", BERLIN, datetime(2024, 3, 31))
    assert day == hourly_utc(utc(2024, 3, 30, 23), 23)


def test_hourly_macro_follows_the_wall_clock_on_fall_back_day():
    day = fires_on_local_day("@hourly", BERLIN, datetime(2024, 10, 27))
    assert len(day) == 25


def test_wildcard_hour_fires_in_both_passes_of_the_repeated_hour():
    assert fires("*/30 * * * *", NEW_YORK, utc(2024, 11, 3, 4, 45), 5) == [
        utc(2024, 11, 3, 5, 0),  # 01:00 EDT
        utc(2024, 11, 3, 5, 30),  # 01:30 EDT
        utc(2024, 11, 3, 6, 0),  # 01:00 EST
        utc(2024, 11, 3, 6, 30),  # 01:30 EST
        utc(2024, 11, 3, 7, 0),  # 02:00 EST
    ]


def test_wildcard_hour_fires_in_both_passes_berlin():
    assert fires("15 * * * *", BERLIN, utc(2024, 10, 26, 23, 30), 4) == [
        utc(2024, 10, 27, 0, 15),  # 02:15 CEST
        utc(2024, 10, 27, 1, 15),  # 02:15 CET
        utc(2024, 10, 27, 2, 15),  # 03:15 CET
        utc(2024, 10, 27, 3, 15),
    ]


def test_wildcard_hour_from_inside_first_pass_replays_the_second_pass():
    schedule = cron("30 * * * *", NEW_YORK)
    assert schedule.next_after(utc(2024, 11, 3, 5, 30)) == utc(2024, 11, 3, 6, 30)
    assert schedule.next_after(utc(2024, 11, 3, 5, 45)) == utc(2024, 11, 3, 6, 30)
    early = cron("10 * * * *", NEW_YORK)
    assert early.next_after(utc(2024, 11, 3, 5, 5)) == utc(2024, 11, 3, 5, 10)


def test_wildcard_hour_from_inside_second_pass_continues_the_second_pass():
    schedule = cron("30 * * * *", NEW_YORK)
    assert schedule.next_after(utc(2024, 11, 3, 6, 10)) == utc(2024, 11, 3, 6, 30)
    assert schedule.next_after(utc(2024, 11, 3, 6, 30)) == utc(2024, 11, 3, 7, 30)


def test_wildcard_hour_skips_the_missing_hour():
    # 01:30 EST, then 03:30 EDT: 02:30 does not exist and does not fire.
    assert fires("30 * * * *", NEW_YORK, utc(2024, 3, 10, 6), 2) == [
        utc(2024, 3, 10, 6, 30),
        utc(2024, 3, 10, 7, 30),
    ]


def test_every_second_crosses_both_transitions_without_gaps_or_repeats():
    schedule = cron("* * * * * *", NEW_YORK)
    assert schedule.next_after(utc(2024, 3, 10, 6, 59, 59)) == utc(2024, 3, 10, 7)
    assert schedule.next_after(utc(2024, 11, 3, 5, 59, 59)) == utc(2024, 11, 3, 6)


def test_every_fifteen_minutes_on_fall_back_day_fires_100_times():
    day = fires_on_local_day("*/15 * * * *", NEW_YORK, datetime(2024, 11, 3))
    assert len(day) == 100
    assert day == [utc(2024, 11, 3, 4) + timedelta(minutes=15 * index) for index in range(100)]


# -- other zones -----------------------------------------------------------------------------


def test_half_hour_dst_shift_lord_howe():
    # Australia/Lord_Howe shifts by 30 minutes: 2024-04-07 02:00 +11 -> 01:30 +10:30
    # (at 15:00 UTC the day before); 01:45 happens twice.
    assert fires("45 1 * * *", "Australia/Lord_Howe", utc(2024, 4, 6, 12), 2) == [
        utc(2024, 4, 6, 14, 45),
        utc(2024, 4, 7, 15, 15),
    ]
    assert fires("45 * * * *", "Australia/Lord_Howe", utc(2024, 4, 6, 14), 2) == [
        utc(2024, 4, 6, 14, 45),
        utc(2024, 4, 6, 15, 15),
    ]


def test_zone_without_dst_is_a_fixed_offset():
    assert fires("30 2 * * *", "Asia/Kolkata", utc(2024, 3, 10), 1) == [utc(2024, 3, 10, 21)]
