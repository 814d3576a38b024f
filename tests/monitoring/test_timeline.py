"""An execution's timeline lists its states in the order they happened."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduler_app.models import TaskExecution
from scheduler_app.monitoring.stats import execution_timeline

T0 = datetime(2027, 1, 1, tzinfo=UTC)


def test_a_fire_rung_ahead_reads_queued_then_scheduled_then_running():
    execution = TaskExecution(
        status="success",
        scheduled_at=T0,
        queued_at=T0 - timedelta(milliseconds=500),
        started_at=T0 + timedelta(milliseconds=2),
        completed_at=T0 + timedelta(milliseconds=9),
    )
    steps = execution_timeline(execution)
    assert [step["state"] for step in steps] == ["queued", "scheduled", "running", "success"]
