"""A real standby beat keeps its heap warm from the change feed, without reloading."""

from __future__ import annotations

import json

import pytest
from django.conf import settings

from scheduler_app.redis_client import get_redis
from scheduler_app.services.task_definitions import task_pause
from tests.factories import make_task
from tests.integration.test_beat_leadership import _lock_view
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _status(node: str) -> dict:
    raw = get_redis().get(f"{settings.SCHEDULER['REDIS_KEY_PREFIX']}scheduler:node:{node}")
    return json.loads(raw) if raw else {}


def test_the_standby_follows_creates_and_pauses_without_a_reload(tenant, beats):
    processes = {"alpha": beats("alpha"), "beta": beats("beta")}
    leader = wait_until(_lock_view().current_leader, timeout=30, message="a leader")
    standby = next(name for name in processes if name != leader.node)
    wait_until(lambda: _status(standby).get("role") == "standby", timeout=30, message="standby")

    tasks = [
        make_task(tenant, name=f"hourly-{i}", schedule={"type": "cron", "expression": "0 * * * *"})
        for i in range(20)
    ]
    wait_until(lambda: _status(standby).get("heap_size") == 20, timeout=10, message="20 in heap")
    task_pause(task=tasks[0])
    status = wait_until(
        lambda: (s := _status(standby)).get("heap_size") == 19 and s,
        timeout=10,
        message="the pause to reach the standby",
    )
    # Target 1 s; generous here because other test runs share the machine.
    assert status["change_feed_lag_seconds"] <= 3.0, status
    log = processes[standby].log()
    assert log.count("loaded") == 1, log[-2000:]  # the initial load only
