"""The "leader failover" rule, which does the first step of its runbook itself.

Leadership changed hands when a shard's lock holder took it (epoch > 1: not the first
leader this Redis has known) within ALERTS_LEADER_FAILOVER_WINDOW_SECONDS. The runbook
asks first whether PostgreSQL's primary is healthy; the alert answers with a real write
(alerting/services/write_probe.py), since a database that only answers reads stops every
fire as surely as a dead one. One incident per (shard, epoch): a second failover is a
second alert; the incident resolves when the window has passed. A warning, or critical
(it pages) when the database refuses writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings

from alerting.services.write_probe import database_write_probe
from scheduler_app.services.scheduler_control import scheduler_status

RULE = "leader_failover"


@dataclass(frozen=True)
class Failover:
    key: str
    summary: str
    age_seconds: float
    writes_answered: bool


CLOCK_SLACK_SECONDS = 5.0


def leader_failovers(now: datetime) -> list[Failover]:
    window = settings.ALERTS["LEADER_FAILOVER_WINDOW_SECONDS"]
    recent = []
    for shard in scheduler_status()["shards"]:
        leader = shard["leader"]
        if not leader or leader["epoch"] <= 1:
            continue
        age = now.timestamp() - leader["since"]
        # `since` is the new leader's clock, to the millisecond: just ahead of this one's when
        # it is rounded up, or when the hosts' clocks are a little apart.
        if -CLOCK_SLACK_SECONDS <= age <= window:
            recent.append((shard["shard"], leader, max(age, 0.0)))
    if not recent:
        return []
    probe = database_write_probe(now=now)
    database = (
        f"PostgreSQL answers writes ({probe.detail})"
        if probe.answers_writes
        else f"PostgreSQL does NOT answer writes ({probe.detail})"
    )
    return [
        Failover(
            key=f"shard-{index}:epoch-{leader['epoch']}",
            summary=(
                f"scheduler leadership changed hands {age:.0f} s ago: {leader['node']} leads"
                f" (epoch {leader['epoch']}, shard {index}); {database}"
            ),
            age_seconds=age,
            writes_answered=probe.answers_writes,
        )
        for index, leader, age in recent
    ]
