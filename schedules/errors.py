"""The one exception type of the schedules package."""

from __future__ import annotations


class ScheduleError(ValueError):
    """A schedule definition is invalid.

    `field` names the offending input in the API's dotted terms (`schedule.expression`,
    `schedule.timezone`, `schedule.run_at`, `schedule.type`); `message` is human text.
    """

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def __reduce__(self) -> tuple[object, ...]:
        # Keep the keyword-only `field` when pickled (e.g. across Celery workers).
        return (_rebuild, (self.message, self.field))


def _rebuild(message: str, field: str) -> ScheduleError:
    return ScheduleError(message, field=field)


def expression_error(message: str) -> ScheduleError:
    return ScheduleError(message, field="schedule.expression")
