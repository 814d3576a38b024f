"""Calendar exclusions (`schedule.exclude`): parsing, the local-day rule across both DST
transitions, public holidays, crons, and the timeline the preview shows.

2026 transitions used here:
  Europe/Berlin     spring 2026-03-29 01:00 UTC: 02:00 CET  -> 03:00 CEST
                    fall   2026-10-25 01:00 UTC: 03:00 CEST -> 02:00 CET (02:xx twice)
  America/New_York  fall   2026-11-01 06:00 UTC: 02:00 EDT -> 01:00 EST
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduler_app.task_schedule import schedule_for
from schedules import ScheduleError, fires_between, parse_schedule, preview
from schedules.exclusions import ExcludingSchedule, exclusions_parse, with_exclusions
from schedules.preview import timeline

BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def excluded(expression: str, zone: str, rules: list) -> ExcludingSchedule:
    schedule = with_exclusions(
        parse_schedule(schedule_type="cron", expression=expression, timezone=zone),
        exclusions_parse(rules),
    )
    assert isinstance(schedule, ExcludingSchedule)
    return schedule


def utcs(schedule, after: datetime, count: int) -> list[datetime]:
    return [fire.utc for fire in preview(schedule, count=count, now=after)]


class TestLocalDaysAcrossDst:
    def test_spring_forward_a_fire_is_excluded_by_its_local_date_not_its_utc_date(self):
        # 00:30 Berlin on 29 March is 23:30 UTC on the 28th; on the 30th it is 22:30 UTC.
        schedule = excluded("30 0 * * *", BERLIN, [{"date": "2026-03-29"}])
        assert utcs(schedule, utc(2026, 3, 27, 12), 2) == [
            utc(2026, 3, 27, 23, 30),  # 28 March local
            utc(2026, 3, 29, 22, 30),  # 30 March local (CEST), on the excluded UTC date
        ]

    def test_spring_forward_the_gap_fire_of_an_excluded_day_is_skipped(self):
        # 02:30 does not exist on 29 March: it fires at 03:00 CEST (01:00 UTC) unless excluded.
        schedule = excluded("30 2 * * *", BERLIN, [{"date": "2026-03-29"}])
        assert utcs(schedule, utc(2026, 3, 28, 12), 1) == [utc(2026, 3, 30, 0, 30)]
        entries = timeline(schedule, count=1, now=utc(2026, 3, 28, 12))
        assert [(e.fire.utc, e.skipped) for e in entries] == [
            (utc(2026, 3, 29, 1, 0), True),
            (utc(2026, 3, 30, 0, 30), False),
        ]

    def test_fall_back_both_occurrences_of_the_repeated_hour_are_skipped(self):
        # "*/30 2" follows the wall clock: 02:00 and 02:30 fire in both occurrences.
        schedule = excluded("*/30 2 * * *", BERLIN, [{"date": "2026-10-25", "reason": "freeze"}])
        entries = timeline(schedule, count=1, now=utc(2026, 10, 24, 12))
        assert [(e.fire.utc, e.skipped, e.reason) for e in entries] == [
            (utc(2026, 10, 25, 0, 0), True, "freeze"),  # 02:00 CEST
            (utc(2026, 10, 25, 0, 30), True, "freeze"),  # 02:30 CEST
            (utc(2026, 10, 25, 1, 0), True, "freeze"),  # 02:00 CET
            (utc(2026, 10, 25, 1, 30), True, "freeze"),  # 02:30 CET
            (utc(2026, 10, 26, 1, 0), False, ""),  # 02:00 CET on the 26th
        ]

    def test_fall_back_late_evening_fire_is_excluded_by_its_local_date(self):
        # 23:30 EST on 1 November is 04:30 UTC on the 2nd.
        schedule = excluded("30 23 * * *", NEW_YORK, [{"date": "2026-11-01"}])
        assert utcs(schedule, utc(2026, 11, 1, 12), 1) == [utc(2026, 11, 3, 4, 30)]
        schedule = excluded("30 23 * * *", NEW_YORK, [{"date": "2026-11-02"}])
        assert utcs(schedule, utc(2026, 11, 1, 12), 1) == [utc(2026, 11, 2, 4, 30)]

    def test_a_day_whose_midnight_does_not_exist_ends_at_the_transition(self):
        # Santiago springs forward at 24:00 on 5 September 2026: the 6th starts at 01:00.
        schedule = excluded("*/30 * * * *", "America/Santiago", [{"date": "2026-09-05"}])
        assert utcs(schedule, utc(2026, 9, 5, 4, 15), 1) == [utc(2026, 9, 6, 4, 0)]

    def test_a_day_whose_last_hour_repeats_skips_it_twice(self):
        # Santiago falls back at 24:00 on 4 April 2026: 23:00-24:00 happens twice.
        schedule = excluded("*/30 * * * *", "America/Santiago", [{"date": "2026-04-04"}])
        assert utcs(schedule, utc(2026, 4, 4, 12), 1) == [utc(2026, 4, 5, 4, 0)]


class TestRules:
    def test_range_is_inclusive_and_stepped_over_at_once(self):
        schedule = excluded("0 9 * * *", "UTC", [{"from": "2026-12-24", "to": "2027-01-01"}])
        assert utcs(schedule, utc(2026, 12, 23, 12), 1) == [utc(2027, 1, 2, 9)]
        assert utcs(schedule, utc(2026, 12, 22, 12), 1) == [utc(2026, 12, 23, 9)]

    def test_an_every_minute_schedule_over_a_long_range_is_stepped_in_one_jump(self):
        inner = parse_schedule(schedule_type="cron", expression="* * * * *", timezone="UTC")
        calls = []

        class Counting:
            timezone = inner.timezone

            def next_after(self, moment):
                calls.append(moment)
                return inner.next_after(moment)

        rules = exclusions_parse([{"from": "2026-01-01", "to": "2026-12-31"}])
        schedule = with_exclusions(Counting(), rules)
        assert schedule.next_after(utc(2025, 12, 31, 23, 59)) == utc(2027, 1, 1, 0, 0)
        assert len(calls) == 2

    def test_cron_rule_skips_weekends_on_the_wall_clock(self):
        # 2026-12-05 is a Saturday; 23:30 New York on Friday the 4th is Saturday in UTC.
        schedule = excluded("30 23 * * *", NEW_YORK, [{"cron": "* * * * 6,0"}])
        fires = utcs(schedule, utc(2026, 12, 4, 12), 2)
        assert fires == [utc(2026, 12, 5, 4, 30), utc(2026, 12, 8, 4, 30)]  # Fri, Mon local
        entries = timeline(schedule, count=2, now=utc(2026, 12, 4, 12))
        assert [e.reason for e in entries if e.skipped] == [
            "excluded by cron * * * * 6,0",
            "excluded by cron * * * * 6,0",
        ]

    def test_cron_rule_matches_a_jittered_fire_by_its_minute(self):
        schedule = schedule_for(
            schedule_type="cron",
            expression="0 9 * * *",
            timezone="UTC",
            run_at=None,
            anchor=None,
            jitter_seconds=50,
            seed="t",
            exclude=exclusions_parse([{"cron": "* 9 * * 6,0"}]),
        )
        fires = fires_between(schedule, start=utc(2026, 12, 4), end=utc(2026, 12, 9), limit=10)
        assert [fire.date().isoformat() for fire in fires] == [
            "2026-12-04",
            "2026-12-07",
            "2026-12-08",
        ]

    def test_us_holidays(self):
        schedule = excluded("0 9 * * *", NEW_YORK, [{"calendar": "holidays:US"}])
        entries = timeline(schedule, count=1, now=utc(2026, 12, 24, 15))
        assert [(e.fire.local.date().isoformat(), e.skipped, e.reason) for e in entries] == [
            ("2026-12-25", True, "Christmas Day"),
            ("2026-12-26", False, ""),
        ]

    def test_bavarian_holidays_differ_from_berlins(self):
        # Epiphany (6 January) is a public holiday in Bavaria, not in Berlin.
        weekday = "0 9 * * 1-5"
        bavaria = excluded(weekday, BERLIN, [{"calendar": "holidays:de-by", "reason": "closed"}])
        berlin = excluded(weekday, BERLIN, [{"calendar": "holidays:DE-BE"}])
        now = utc(2026, 1, 5, 12)
        assert utcs(bavaria, now, 1) == [utc(2026, 1, 7, 8)]
        assert utcs(berlin, now, 1) == [utc(2026, 1, 6, 8)]
        assert timeline(bavaria, count=1, now=now)[0].reason == "closed: Epiphany"

    def test_canonical_form(self):
        assert exclusions_parse(
            [{"calendar": "holidays:de-by", "reason": " shut "}, {"cron": " 0 9 * * 6 "}]
        ) == [{"calendar": "holidays:DE-BY", "reason": "shut"}, {"cron": "0 9 * * 6"}]

    def test_a_rule_that_excludes_everything_ends_the_schedule(self):
        schedule = excluded("0 * * * *", "UTC", [{"cron": "* * * * *"}])
        assert schedule.next_after(utc(2026, 1, 1)) is None


@pytest.mark.parametrize(
    ("rules", "field"),
    [
        ("2026-12-25", "schedule.exclude"),
        ([{"date": "2026-02-30"}], "schedule.exclude[0].date"),
        ([{"date": "25/12/2026"}], "schedule.exclude[0].date"),
        (
            [{"date": "2026-12-25"}, {"from": "2027-01-02", "to": "2027-01-01"}],
            "schedule.exclude[1].to",
        ),
        ([{"from": "2027-01-02"}], "schedule.exclude[0].to"),
        ([{"cron": "61 * * * *"}], "schedule.exclude[0].cron"),
        ([{"calendar": "holidays:XX"}], "schedule.exclude[0].calendar"),
        ([{"calendar": "holidays:DE-ZZ"}], "schedule.exclude[0].calendar"),
        ([{"calendar": "US"}], "schedule.exclude[0].calendar"),
        ([{"date": "2026-12-25", "note": "x"}], "schedule.exclude[0].note"),
        ([{"date": "2026-12-25", "reason": 5}], "schedule.exclude[0].reason"),
        ([{"date": "2026-12-25", "cron": "* * * * *"}], "schedule.exclude[0]"),
        ([{}], "schedule.exclude[0]"),
        (["2026-12-25"], "schedule.exclude[0]"),
        ([{"date": "2026-12-25"}] * 101, "schedule.exclude"),
    ],
)
def test_bad_rules_name_the_field(rules, field):
    with pytest.raises(ScheduleError) as caught:
        exclusions_parse(rules)
    assert caught.value.field == field
