"""Flow control's registrations (from `SchedulerAppConfig.ready`): the task check that a
pool named by a task is one of its tenant's, and the leader's chore pruning old rate-limit
starts."""

from __future__ import annotations

from scheduler_app.housekeeping import Chore, chore_register
from scheduler_app.services.flow_admission import flow_rate_starts_prune
from scheduler_app.services.pools import pool_names_check
from scheduler_app.task_checks import task_check_register


def flow_chores_register() -> None:
    task_check_register("flow_pools", pool_names_check)
    chore_register(Chore("flow_rate_starts_prune", lambda now: flow_rate_starts_prune(now=now)))
