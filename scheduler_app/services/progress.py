"""The write of a run's progress: its last report, stored with the execution when it ends."""

from __future__ import annotations

from typing import Any

from scheduler_app.models import TaskExecution


def execution_progress_save(*, execution: TaskExecution, progress: dict[str, Any]) -> None:
    """After the finish was accepted; an extra statement only for runs that reported progress
    (most do not), so the finish itself stays one statement. `scheduled_at` picks the
    partition."""
    TaskExecution.objects.filter(id=execution.id, scheduled_at=execution.scheduled_at).update(
        progress=progress
    )
