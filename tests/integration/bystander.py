"""The other tenant, timed: while an attacker spends past a budget, a bystander tenant runs
no-op tasks on the same real worker one after another, and each run's time from trigger to
its end is kept. The budgets promise those stay what an idle system gives."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from scheduler_app.models import TaskExecution, Tenant
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task
from tests.processes import wait_until


class Bystander:
    def __init__(self, tenant: Tenant) -> None:
        self.task = make_task(
            tenant,
            name=f"bystander-{uuid.uuid4().hex[:8]}",
            schedule={"type": "manual"},
            handler={"type": "python", "callable": "noop"},
        )
        self.seconds: list[float] = []

    def run_once(self, *, timeout: float = 120) -> float:
        started = time.monotonic()
        execution = task_trigger(task=self.task)
        wait_until(
            lambda: TaskExecution.platform.get(id=execution.id).status == "success",
            timeout=timeout,
            interval=0.02,
            message="the bystander's no-op to succeed",
        )
        self.seconds.append(time.monotonic() - started)
        return self.seconds[-1]

    def run_while(self, attack_going: Callable[[], bool], *, at_least: int = 3) -> list[float]:
        """No-op runs one after another while the attack goes on (and at least `at_least`)."""
        while attack_going() or len(self.seconds) < at_least:
            self.run_once()
        return self.seconds
