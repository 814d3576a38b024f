"""The doorbell: what a broker message carries for a run (see `scheduler_app.ringing.publish`).

A leaf module (it imports nothing of the project), so every side that makes, admits,
routes or sends doorbells can name the type without importing the others.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Doorbell:
    execution_id: str
    tenant_id: str
    queue: str
    # The task's name when the caller has it at hand, else its id; ringing finds the name.
    task_name: str | None = None
    task_id: str | None = None
    # The run's trace context, for the ring's span; never part of the message (the worker
    # reads the run's own from its row at the claim).
    traceparent: str = ""
