"""Scheduler status and forced failover through the admin API, against real beat processes."""

from __future__ import annotations

import pytest

from tests.api_clients import staff_client
from tests.integration.conftest import dump_logs
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _status(client) -> dict:
    response = client.get("/api/v1/admin/scheduler/status")
    assert response.status_code == 200, response.content
    return response.json()


def test_status_shows_leader_and_standby_and_failover_hands_over(api, beats):
    first, second = beats("alpha"), beats("beta")
    staff = staff_client()
    try:
        # The lock holder is known from the lock before its first node report is written:
        # wait for both nodes' reports (the leader's gives its lag).
        wait_until(
            lambda: (
                (body := _status(api))["leader"] is not None
                and body["leader"]["lag_seconds"] is not None
                and len(body["standbys"]) == 1
            ),
            timeout=30,
            message="a leader and a standby report",
        )
    except AssertionError:
        print(dump_logs(first, second))
        raise
    before = _status(staff)
    old_leader, old_epoch = before["leader"]["node"], before["leader"]["epoch"]
    assert before["leader"]["lag_seconds"] is not None and before["leader"]["lag_seconds"] < 10
    assert api.post("/api/v1/admin/scheduler/failover").status_code == 403  # tenant admin
    answer = staff.post("/api/v1/admin/scheduler/failover")
    assert answer.status_code == 202 and answer.json()["previous_leader"] == old_leader
    try:
        wait_until(
            lambda: (
                (leader := _status(staff)["leader"]) is not None and leader["node"] != old_leader
            ),
            timeout=30,
            message="the standby took over",
        )
    except AssertionError:
        print(dump_logs(first, second))
        raise
    assert _status(staff)["leader"]["epoch"] > old_epoch


def test_sharded_status_covers_every_shard_and_failover_moves_the_one_named(beats, settings):
    """SCHEDULER_SHARDS=2 on three beats (fair share 1: one beat leads nothing): the status
    shows both shards' leaders, and failing shard 1 over moves it to another beat, with a
    new epoch, while shard 0 keeps its leader."""
    settings.SCHEDULER = {**settings.SCHEDULER, "SHARDS": 2, "LOCK_TTL_SECONDS": 1.5}
    started = [beats(name, SCHEDULER_SHARDS="2") for name in ("alpha", "beta", "gamma")]
    staff = staff_client()
    try:
        before = wait_until(
            lambda: (
                (body := _status(staff))
                and all(shard["leader"] for shard in body["shards"])
                and len(body["beats"]) == 3
                # Settled: the first beat up may lead both until the others join the roster
                # and it hands one back.
                and len({shard["leader"]["beat"] for shard in body["shards"]}) == 2
                # and each beat's status names what it stands by for (published per tick).
                and len(body["shards"][1]["standbys"]) == 2
                and body
            ),
            timeout=60,
            message="both shards led by two beats, three beats in the roster, two standbys",
        )
    except AssertionError:
        print(dump_logs(*started))
        raise
    assert [shard["shard"] for shard in before["shards"]] == [0, 1]
    zero, one = (shard["leader"] for shard in before["shards"])
    assert zero["beat"] != one["beat"]  # fair share 1: no beat leads both
    assert len(before["shards"][1]["standbys"]) == 2
    answer = staff.post("/api/v1/admin/scheduler/failover?shard=1")
    assert answer.status_code == 202, answer.content
    assert answer.json()["previous_leader"] == one["node"]
    try:
        moved = wait_until(
            lambda: (
                (leader := _status(staff)["shards"][1]["leader"])
                and leader["beat"] != one["beat"]
                and leader
            ),
            timeout=30,
            message="another beat took shard 1",
        )
    except AssertionError:
        print(dump_logs(*started))
        raise
    assert moved["epoch"] > one["epoch"]
    assert _status(staff)["shards"][0]["leader"]["node"] == zero["node"]
