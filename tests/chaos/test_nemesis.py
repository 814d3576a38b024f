"""The randomized nemesis under load, then the history checker (tests/chaos/nemesis.py,
faults.py, history.py say what each does).

`make test` runs the short form: seed 31, 45 s of faults over 15 one-second tasks (15 fires
a second, catch-up `all`), 70-120 s with the stack's start and settling; its file is
recorded as one of the longest in tests/durations.json, so tests/suite_order.py starts it
first and the rest of the suite runs beside it. `make chaos` runs the long form: 10 minutes
of faults, held longer, over the same tasks, the seed from the command line
(`make chaos SEED=7`), and writes bench/results/nemesis.md.

NEMESIS_POSTGRES=cluster (the default of `make chaos`) runs it on tests/pg_cluster.py's
primary and synchronous standby instead of the single test PostgreSQL, which adds the
PostgreSQL faults (faults.py: the replication link cut, the primary killed and the standby
promoted); the in-suite form stays on the single one, its plan and time unchanged.
NEMESIS_SECONDS shortens or lengthens the long form's faults (`make chaos NEMESIS_SECONDS=180`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connections

from scheduler_app.models import TaskDefinition, Tenant
from scheduler_app.task_schedule import schedule_of
from tests.chaos.faults import FAULT_KINDS
from tests.chaos.harness import LONG, chaos_stack, ledger_task_spec, scaled
from tests.chaos.history import Rules, RunRecord, TaskRecord, check
from tests.chaos.nemesis import Nemesis, NemesisStack, PoolSampler, faketime_env, plan
from tests.chaos.nemesis_report import render
from tests.factories import make_task
from tests.ledger import ledger_entries
from tests.pg_cluster import PgCluster, binaries_present, django_default_at, pg_cluster
from tests.processes import service_logs_folder
from tests.redis_drop_proxy import RedisDropProxy

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_os_tool("faketime")]

SEED = int(os.environ.get("NEMESIS_SEED", "31"))
# The short form: one round of every fault kind (45 s). A second round (90 s) SIGSTOPped w2
# too, after which the checker excludes all of its processes: it hid runs of a worker the
# nemesis never harmed executed twice (reaped by a beat whose clock was stepped ahead).
SECONDS = scaled(45, float(os.environ.get("NEMESIS_SECONDS", "600")))
ON_CLUSTER = os.environ.get("NEMESIS_POSTGRES", "single") == "cluster"
# The same load in both forms, which one worker carries alone (with a worker down, a load
# above capacity grows a backlog that never drains, and the case would measure that: a first
# ten-minute run with 30 tasks on this shared 2-core machine fell behind by 20 runs a second).
TASKS = 15
SLOTS = 3
HANDLER_SECONDS = 0.1  # long enough for a kill to catch runs in flight


def _tasks(stack, tenant) -> None:
    # No concurrency quota: a run deferred by it is moved to a later scheduled_at, and the row
    # no longer says which instant it was (the checker would count that instant missing). A
    # leader whose clock is 30 s ahead claims 30 s of runs early, which a quota of 100 defers.
    Tenant.objects.filter(id=tenant.id).update(max_concurrent_runs=1_000_000)
    for index in range(TASKS):
        spec = ledger_task_spec(index, stack.ledger, HANDLER_SECONDS)
        spec["parameters"]["claims"] = True
        # Every missed instant inside the window is owed: a hole is a loss, never a choice.
        spec["policy"] = {"catchup": "all"}
        stack.tasks.append(make_task(tenant, **spec))


def _history(stack):
    runs = [
        RunRecord(str(r.id), str(r.task_id), r.scheduled_at, r.attempt, r.status, r.created_at)
        for r in stack.executions()
    ]
    tasks = []
    for task in TaskDefinition.platform.filter(id__in=[t.id for t in stack.tasks]):
        schedule = schedule_of(task)
        tasks.append(TaskRecord(str(task.id), task.created_at, task.paused_at, schedule.next_after))
    return runs, tasks


@contextlib.contextmanager
def _postgres() -> Iterator[tuple[PgCluster | None, dict[str, str]]]:
    """The database the stack runs on: the test database, or (NEMESIS_POSTGRES=cluster) a
    copy of it on a primary and its synchronous standby, which this process's own reads and
    writes then use too (the drill's way, tests/integration/test_database_failover.py)."""
    if not ON_CLUSTER:
        yield None, {}
        return
    assert binaries_present(), "NEMESIS_POSTGRES=cluster needs the PostgreSQL 15 binaries"
    source = connections["default"].settings_dict
    with pg_cluster(synchronous=True) as cluster:
        database = f"nemesis_{uuid.uuid4().hex[:8]}"
        cluster.create_database_from(
            f"postgres://{source.get('USER') or 'postgres'}@{source.get('HOST') or '127.0.0.1'}"
            f":{source.get('PORT') or 5432}/{source['NAME']}",
            database,
        )
        url = cluster.url(database)
        env = {
            "DATABASE_URL": url,
            "DATABASE_RETRY_SECONDS": "60",
            # Longer than a failover's hold: a lease running out while the primary is away
            # would hand a run still running to a second attempt.
            "WORKER_LEASE_SECONDS": "30",
        }
        with django_default_at(url):
            yield cluster, env


@pytest.mark.timeout(int(scaled(420, 1500)))
def test_a_seeded_nemesis_leaves_a_history_the_checker_finds_clean(
    tenant, tmp_path, settings, record_case
):
    with (
        _postgres() as (cluster, database_env),
        chaos_stack(tenant, tmp_path, settings, tasks=0) as stack,
    ):
        stack.env.update(database_env)
        _tasks(stack, tenant)  # the nemesis' own (catch-up all, claims in the ledger)
        proxy = RedisDropProxy(upstream_port=stack.redis.port, seed=SEED)
        clock_file = tmp_path / "beat-b.clock"
        clock_file.write_text("+0\n")
        broker = {"CELERY_BROKER_URL": proxy.url()}
        target = NemesisStack(
            stack,
            proxy,
            clock_file,
            beat_env={"a": broker, "b": {**broker, **faketime_env(clock_file)}},
            cluster=cluster,
        )
        try:
            target.start_beat("a")
            target.start_beat("b")
            for name in ("w1", "w2"):
                stack.start_worker(name, concurrency=SLOTS, wait=False, **broker)
            stack.wait_for_workers()
            stack.wait_for_runs(TASKS)
            sampler = PoolSampler(stack)
            sampler.start()
            kinds = [kind for kind in FAULT_KINDS if kind().applicable(target)]
            steps = plan(SEED, seconds=SECONDS, kinds=kinds, long=LONG)
            nemesis = Nemesis(target, steps, seed=SEED, log_path=tmp_path / "nemesis.log")
            nemesis.run()
            stack.wait_for_resume()
            survivors = sampler.survivors(nemesis.harmed)
            result = record_case(
                # Three minutes for the backlog the faults left to drain: on a machine shared
                # with the rest of the suite (a load average of 20 seen), a minute was not.
                stack.settle(
                    case=f"nemesis-seed-{SEED}", fault=f"{len(steps)} random faults", timeout=180
                )
            )
        finally:
            proxy.close()
        runs, tasks = _history(stack)  # on the cluster, when the nemesis ran on it
        # Every process's log, the killed ones' too, kept beside the nemesis' own.
        shutil.copytree(service_logs_folder(), tmp_path / "logs", dirs_exist_ok=True)
    stepped = any(step.kind == "beat-clock-step" for step in steps)
    rules = Rules(
        catchup_window=timedelta(seconds=django_settings.SCHEDULER["CATCHUP_WINDOW_SECONDS"]),
        ring_ahead=timedelta(seconds=django_settings.SCHEDULER["FIRE_AHEAD_MAX_SECONDS"]),
        clock_step=timedelta(seconds=30 if stepped else 0),
    )
    verdict = check(
        runs=runs,
        tasks=tasks,
        ledger=ledger_entries(stack.ledger),
        survivors=survivors,
        rules=rules,
    )
    report = render(
        seed=SEED,
        seconds=SECONDS,
        long=LONG,
        load=(
            f"{TASKS} one-second tasks ({HANDLER_SECONDS} s handlers), 2 beats, 2 workers x {SLOTS}"
        ),
        nemesis=nemesis,
        verdict=verdict,
    )
    print(report)
    if target_path := os.environ.get("NEMESIS_REPORT"):
        Path(target_path).parent.mkdir(parents=True, exist_ok=True)
        Path(target_path).write_text(report)
    assert verdict.clean, f"{verdict.summary()}\n(logs: {tmp_path})"
    assert result.unended == 0
    assert len({step.kind for step in steps}) >= 5, "the seed should draw most fault kinds"
