"""Schedule parsing and next-fire computation (pure Python: no Django, no Celery).

    schedule = parse_schedule(schedule_type="cron", expression="30 2 * * *",
                              timezone="America/New_York")
    schedule.next_after(now)                 # aware UTC datetime, or None
    preview(schedule, count=5, now=now)      # [FireTime(utc=..., local=...), ...]

Module map: errors (ScheduleError), base (Schedule protocol, FireTime), timezones (zone
loading, DST arithmetic), cron_syntax (text -> CronSpec), cron_days (day-of-month/week
rules), cron_engine (compiled evaluator), cron (CronSchedule + DST rule), interval, once,
manual, factory (parse_schedule), preview (preview, fires_between).
"""

from schedules.base import FireTime, Schedule
from schedules.cron import CronSchedule
from schedules.cron_engine import CompiledCron, compile_cron
from schedules.errors import ScheduleError
from schedules.factory import MAX_EXPRESSION_LENGTH, SCHEDULE_TYPES, parse_schedule
from schedules.interval import IntervalSchedule, parse_interval
from schedules.manual import ManualSchedule
from schedules.once import OnceSchedule
from schedules.preview import fires_between, preview

__all__ = [
    "MAX_EXPRESSION_LENGTH",
    "SCHEDULE_TYPES",
    "CompiledCron",
    "CronSchedule",
    "FireTime",
    "IntervalSchedule",
    "ManualSchedule",
    "OnceSchedule",
    "Schedule",
    "ScheduleError",
    "compile_cron",
    "fires_between",
    "parse_interval",
    "parse_schedule",
    "preview",
]
