"""SCHEDULER_SHARDS=4 on three real beat processes: the shards spread fairly over the beats,
a SIGKILLed beat's shards are taken by the others within the lock TTL, and every
one-second task fires exactly once a second throughout."""

from __future__ import annotations

import collections
import itertools
import signal
import time
from datetime import timedelta

import pytest
from django.conf import settings

from beat.lock import LeaderLock
from scheduler_app.models import TaskExecution
from scheduler_app.redis_client import get_redis
from scheduler_app.shard_keys import shard_key_prefix, shard_of
from tests.factories import make_task
from tests.integration.conftest import dump_logs
from tests.processes import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SHARDS = 4
LOCK_TTL = 1.5
# TTL + a standby's try + a sharded tick's work, on a loaded 2-core machine.
TAKEOVER_LIMIT = 5.0


def _locks() -> list[LeaderLock]:
    return [
        LeaderLock(
            get_redis(),
            key_prefix=shard_key_prefix(settings.SCHEDULER["REDIS_KEY_PREFIX"], index),
            node_id="observer",
            ttl_seconds=LOCK_TTL,
        )
        for index in range(SHARDS)
    ]


def _holders(locks) -> list:
    return [lock.current_leader() for lock in locks]


def _beat_of(info) -> str | None:
    return info.node.split("/")[0] if info else None


def _fairly_spread(locks, beats: set[str]):
    holders = _holders(locks)
    if any(info is None for info in holders):
        return None
    counts = collections.Counter(_beat_of(info) for info in holders)
    if set(counts) != beats or max(counts.values()) - min(counts.values()) > 1:
        return None
    return holders


def _times(task) -> list:
    return list(
        TaskExecution.platform.filter(task=task)
        .order_by("scheduled_at")
        .values_list("scheduled_at", flat=True)
    )


def test_a_killed_beats_shards_move_within_the_ttl_and_each_fire_happens_once(tenant, beats):
    tasks, covered = [], set()
    for index in itertools.count():
        if len(covered) == SHARDS and len(tasks) >= 2 * SHARDS:
            break
        # catchup "all": a fire that falls in the takeover gap is owed and recorded by the new
        # leader ("latest", the default, lets an on-time fire stand for it: a 2 s gap).
        task = make_task(
            tenant,
            name=f"shard-{index}",
            schedule={"type": "cron", "expression": "* * * * * *"},
            policy={"catchup": "all"},
        )
        tasks.append(task)
        covered.add(shard_of(task.id, SHARDS))
    names = ("x", "y", "z")
    processes = {name: beats(name, SCHEDULER_SHARDS=str(SHARDS)) for name in names}
    locks = _locks()
    try:
        holders = wait_until(
            lambda: _fairly_spread(locks, set(names)),
            timeout=90,
            interval=0.25,
            message="the 4 shards spread over the 3 beats",
        )
        wait_until(
            lambda: all(len(_times(task)) >= 4 for task in tasks),
            timeout=30,
            message="every task firing",
        )
        counts = collections.Counter(_beat_of(info) for info in holders)
        victim = counts.most_common(1)[0][0]
        victim_shards = [i for i, info in enumerate(holders) if _beat_of(info) == victim]
        processes[victim].kill(signal.SIGKILL)
        killed_at = time.time()
        new = wait_until(
            lambda: (
                (h := _holders(locks))
                and all(h[i] and _beat_of(h[i]) != victim for i in victim_shards)
                and h
            ),
            timeout=LOCK_TTL + 15,
            interval=0.05,
            message="the victim's shards to move",
        )
        takeover = max(new[i].since for i in victim_shards) - killed_at
        for i in victim_shards:
            assert new[i].epoch == holders[i].epoch + 1
        settle = time.time()
        wait_until(
            lambda: all(
                TaskExecution.platform.filter(
                    task=task, scheduled_at__gt=settle_moment(settle)
                ).count()
                >= 3
                for task in tasks
            ),
            timeout=30,
            message="fires after the takeover",
        )
        survivors = [processes[name] for name in names if name != victim]
        for process in survivors:
            process.stop()
    except AssertionError:
        print(dump_logs(*processes.values()))
        raise

    print(f"shards {victim_shards} of beat {victim} taken over in {takeover:.2f}s")
    assert takeover <= TAKEOVER_LIMIT, takeover
    for task in tasks:
        times = _times(task)
        assert len(times) == len(set(times)), f"{task.name}: a fire recorded twice"
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(gap == timedelta(seconds=1) for gap in gaps), f"{task.name}: {gaps}"


def settle_moment(epoch_seconds: float):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch_seconds, tz=UTC)
