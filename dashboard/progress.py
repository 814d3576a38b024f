"""Progress bars on the dashboard: each execution shown gets `progress_now`, its stored
progress once it ended, else its live one (one Redis read for all the running ones)."""

from __future__ import annotations

from collections.abc import Iterable

from scheduler_app.choices import ExecutionStatus
from scheduler_app.models import TaskExecution
from scheduler_app.progress import progress_live_get_many


def progress_attach(executions: Iterable[TaskExecution]) -> list[TaskExecution]:
    executions = list(executions)
    live = progress_live_get_many(
        str(e.id) for e in executions if e.progress is None and e.status == ExecutionStatus.RUNNING
    )
    for execution in executions:
        execution.progress_now = execution.progress or live.get(str(execution.id))
    return executions
