"""Losing the database loses nothing: the disaster-recovery drill on real PostgreSQL.

One primary and its synchronous streaming standby (tests/pg_cluster.py), one real beat and
one supervised real worker pointed at the multi-host DATABASE_URL, under load: interval
tasks every second (catch-up `all`) and a DAG every second. In file order (they share the
cluster, and the last one kills its primary):

1. a partition between primary and standby: with synchronous replication, commits stall
   (they wait for the standby) and nothing is lost or doubled when the link heals;
2. a stale replica (replay paused): lists read from it are behind, nothing that decides a
   write reads it (no double fire, no lost update);
3. the drill: the primary SIGKILLed, the standby promoted; every write acknowledged before
   the kill is there after it, nothing ran twice, every fire due during the gap is recorded
   once, fires resume. The RTO (kill to first fire on the new primary) and the gap are
   printed (`-s` shows them; docs/operations/disaster-recovery.md quotes them).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.db import connections
from django.utils import timezone

from dags.models import DagRun
from dags.services.definitions import dag_create
from scheduler_app.db_retry import DISCONNECT_ERRORS, connection_discard
from scheduler_app.models import TaskExecution
from scheduler_app.services.tenants import tenant_create_with_admin
from tests.factories import make_task
from tests.integration.conftest import FAST_BEAT, FAST_WORKER, dump_logs
from tests.pg_cluster import (
    binaries_present,
    django_default_at,
    pg_cluster,
)
from tests.processes import broker_key_prefix, start_beat, start_web, stop_all, wait_until
from tests.supervisor import WorkerSupervisor

pytestmark = [
    pytest.mark.slow,
    # The test database is set up (its schema is what the cluster's database copies); the
    # tests' own reads and writes go to the cluster (`django_default_at`).
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not binaries_present(), reason="PostgreSQL 15 binaries missing"),
]

INTERVAL_TASKS = 6
RTO_TARGET_SECONDS = 30.0


class Drill:
    """What the module's tests share: the cluster, its database, the processes."""

    def __init__(self, cluster, database: str, beat, workers: WorkerSupervisor) -> None:
        self.cluster = cluster
        self.database = database
        self.beat = beat
        self.workers = workers

    def logs(self) -> str:
        return dump_logs(self.beat, *self.workers.workers.values())


def _load(tenant) -> None:
    """The drill's load: interval tasks every second and a two-node DAG every second, each
    catching up every fire it missed (`all`), so a gap shows as a missing second."""
    for index in range(INTERVAL_TASKS):
        make_task(
            tenant,
            name=f"every-second-{index}",
            schedule={"type": "interval", "expression": "1s"},
            policy={"catchup": "all"},
        )
    noop = {"type": "python", "callable": "noop"}
    dag_create(
        tenant=tenant,
        raw={
            "dag": "drill-dag",
            "schedule": {"type": "interval", "expression": "1s"},
            "catchup": "all",
            "tasks": [
                {"id": "a", "handler": noop},
                {"id": "b", "handler": noop, "depends_on": ["a"]},
            ],
        },
    )


@pytest.fixture(scope="module")
def drill(django_db_setup, django_db_blocker):
    source = connections["default"].settings_dict  # pytest-django's test database
    with pg_cluster(synchronous=True) as cluster, django_db_blocker.unblock():
        database = f"drill_{uuid.uuid4().hex[:8]}"
        # The test database's migrated schema, copied: no migration run on the cluster.
        cluster.create_database_from(
            f"postgres://{source.get('USER') or 'postgres'}@{source.get('HOST') or '127.0.0.1'}"
            f":{source.get('PORT') or 5432}/{source['NAME']}",
            database,
        )
        cluster.primary.sql("CREATE TABLE drill_ack (n integer PRIMARY KEY)", database=database)
        url = cluster.url(database)
        # Only inside these blocks does this process talk to the cluster: a test's teardown
        # flushes the connection `default` names, which must be the test database then.
        with django_default_at(url):
            tenant, _ = tenant_create_with_admin(
                slug="drill", username="drill-admin", password="pw-123456"
            )
            _load(tenant)
            # The web tier checks passwords with the production hasher (the tests' is MD5).
            get_user_model().objects.filter(username="drill-admin").update(
                password=PBKDF2PasswordHasher().encode("pw-123456", "drill-salt")
            )
        prefix = f"drill-{uuid.uuid4().hex[:8]}:"
        env = {
            "DATABASE_URL": url,
            "DATABASE_RETRY_SECONDS": "60",
            # Longer than a loaded machine's stall: a lease that runs out while the primary
            # is away makes the reaper hand a run still running to a second attempt.
            "WORKER_LEASE_SECONDS": "30",
            "DATABASE_REPLICA_URL": cluster.replica_url(database),
            "SCHEDULER_REDIS_PREFIX": f"{settings.SCHEDULER['REDIS_KEY_PREFIX']}{prefix}",
        }
        workers = WorkerSupervisor()
        with broker_key_prefix(prefix):
            workers.start("w-drill", concurrency=2, env_overrides={**FAST_WORKER, **env})
            beat = start_beat(node_id="drill", env_overrides={**FAST_BEAT, **env})
            state = Drill(cluster, database, beat, workers)
            try:
                with django_default_at(url):
                    wait_until(
                        lambda: (
                            TaskExecution.platform.filter(status="success").count()
                            >= 3 * INTERVAL_TASKS
                        ),
                        timeout=60,
                        message="the load to run",
                    )
                yield state
            except BaseException:
                print(state.logs())
                raise
            finally:
                workers.stop_watching()
                stop_all([beat, *workers.workers.values()])


@contextlib.contextmanager
def _explained(drill: Drill):
    """The beat's and the worker's logs printed when the block fails."""
    try:
        yield
    except BaseException:
        print(drill.logs())
        raise


def _fires_by_task() -> dict[uuid.UUID, list]:
    rows = TaskExecution.platform.filter(
        trigger="schedule", task__name__startswith="every-second-"
    ).values_list("task_id", "scheduled_at")
    fires: dict[uuid.UUID, list] = {}
    for task_id, scheduled_at in rows:
        fires.setdefault(task_id, []).append(scheduled_at)
    return fires


def _assert_each_second_recorded_once(until) -> None:
    """Every interval task's fires, from its first to `until`, one a second: none missed
    (the gap caught up) and none twice; every attempt the first (no run lost and redone)."""
    fires = _fires_by_task()
    assert len(fires) == INTERVAL_TASKS
    for times in fires.values():
        times.sort()
        assert len(set(times)) == len(times), "a fire recorded twice"
        pairs = [(a, b) for a, b in itertools.pairwise(times) if b <= until]
        odd = [(a.isoformat(), b.isoformat()) for a, b in pairs if (b - a).total_seconds() != 1]
        assert not odd, f"fires missing or off their second: {odd[:5]} of {len(pairs)}"
    attempts = Counter(TaskExecution.platform.values_list("attempt", flat=True))
    # A DAG's node runs are executions too: every one of them the first attempt as well.
    redone = list(
        TaskExecution.platform.filter(attempt=1, status="failed").values_list(
            "task__name", "scheduled_at", "started_at", "lease_expires_at", "error_class"
        )
    )
    assert set(attempts) == {1}, f"attempts beyond the first (a run redone): {redone}"
    assert not TaskExecution.platform.filter(status__in=["failed", "timed_out"]).exists()
    dag_times = sorted(DagRun.platform.filter(trigger="schedule").values_list("scheduled_at"))
    assert len(set(dag_times)) == len(dag_times), "a DAG fire started twice"
    dag_steps = {(b[0] - a[0]).total_seconds() for a, b in itertools.pairwise(dag_times)}
    assert dag_steps <= {1.0}, f"DAG fires missing: steps {sorted(dag_steps)}"


def _read(predicate):
    """`predicate` for `wait_until`, read again on a new connection when the primary this
    test process was reading is gone (the test is a client like any other)."""

    def read():
        try:
            return predicate()
        except DISCONNECT_ERRORS:
            connection_discard()
            return False

    return read


def _all_due_ended(until) -> bool:
    return not TaskExecution.platform.filter(
        scheduled_at__lte=until, status__in=["pending", "queued", "running"]
    ).exists()


def test_a_partition_between_primary_and_standby_stalls_commits_and_loses_nothing(drill):
    cluster = drill.cluster
    with _explained(drill), django_default_at(cluster.url(drill.database)):
        cluster.cut_replication()
        cut_at = time.time()
        # Synchronous replication: a commit waits for a standby it cannot reach (wait event
        # SyncRep on the primary). The product's choice: writes stall, they are not
        # acknowledged without the standby (RPO zero over availability).
        waiting = wait_until(
            lambda: cluster.primary.sql(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
            )[0][0],
            timeout=10,
            message="commits waiting for the standby",
        )
        # The partition lasts until a commit has waited two seconds for the standby.
        wait_until(
            lambda: cluster.primary.sql(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' "
                "AND clock_timestamp() - query_start >= interval '2 seconds'"
            )[0][0],
            timeout=20,
            message="a commit to wait two seconds",
        )
        still_waiting = cluster.primary.sql(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
        )[0][0]
        cluster.heal_replication()
        healed_at = time.time()
        wait_until(cluster.streaming, timeout=30, message="the standby to stream again")
        print(
            f"\npartition: cut {healed_at - cut_at:.1f}s, {waiting} commits stalled at first, "
            f"{still_waiting} still waiting at the heal"
        )
        assert still_waiting >= 1
        healed = timezone.now()
        wait_until(
            lambda: (
                TaskExecution.platform.filter(
                    scheduled_at__gt=healed + timedelta(seconds=2), status="success"
                ).count()
                >= INTERVAL_TASKS
            ),
            timeout=30,
            message="fires to run again after the heal",
        )
        wait_until(lambda: _all_due_ended(healed), timeout=30, message="the partition's runs")
        _assert_each_second_recorded_once(until=healed)
        wait_until(cluster.replay_caught_up, timeout=30, message="the standby to catch up")


def test_a_stale_replica_serves_stale_lists_and_decides_no_write(drill):
    """The web tier with DATABASE_REPLICA_URL at the standby, whose replay is paused (it still
    receives WAL, so synchronous commits return): the task list, read from the replica, is
    behind; a task's page and every write read the primary, so two updates in a row both
    stay; the beat and the worker (the replica configured for them too) fire each second
    once meanwhile."""
    cluster = drill.cluster
    web = start_web(
        env_overrides={
            "DATABASE_URL": cluster.url(drill.database),
            "DATABASE_REPLICA_URL": cluster.replica_url(drill.database),
        }
    )
    api = requests.Session()
    try:
        token = api.post(
            f"{web.extra['url']}/api/v1/auth/token",
            json={"username": "drill-admin", "password": "pw-123456"},
            timeout=30,
        )
        assert token.status_code == 200, token.text
        api.headers["Authorization"] = f"Bearer {token.json()['access']}"
        tasks = f"{web.extra['url']}/api/v1/tasks"
        with _explained(drill), django_default_at(cluster.url(drill.database)):
            cluster.pause_replay()
            try:
                paused = timezone.now()
                created = api.post(
                    tasks,
                    json={
                        "name": "made-while-stale",
                        "schedule": {"type": "manual"},
                        "handler": {"type": "python", "callable": "noop"},
                    },
                    timeout=30,
                )
                assert created.status_code == 201, created.text
                task_id = created.json()["id"]
                listed = api.get(tasks, params={"search": "made-while-stale"}, timeout=30)
                assert listed.status_code == 200 and listed.json()["count"] == 0  # stale
                first = api.patch(f"{tasks}/{task_id}", json={"description": "first"}, timeout=30)
                second = api.patch(f"{tasks}/{task_id}", json={"tags": ["second"]}, timeout=30)
                assert (first.status_code, second.status_code) == (200, 200), second.text
                page = api.get(f"{tasks}/{task_id}", timeout=30).json()
                assert (page["description"], page["tags"]) == ("first", ["second"])
                wait_until(
                    lambda: (
                        TaskExecution.platform.filter(
                            scheduled_at__gt=paused + timedelta(seconds=2), status="success"
                        ).count()
                        >= INTERVAL_TASKS
                    ),
                    timeout=30,
                    message="fires to run while the replica is stale",
                )
            finally:
                cluster.resume_replay()
            wait_until(cluster.replay_caught_up, timeout=30, message="the standby to catch up")
            listed = api.get(tasks, params={"search": "made-while-stale"}, timeout=30).json()
            assert listed["count"] == 1
            wait_until(lambda: _all_due_ended(paused), timeout=30, message="the stale runs")
            _assert_each_second_recorded_once(until=paused + timedelta(seconds=2))
    finally:
        web.stop()


def test_the_primary_killed_under_load_and_its_standby_promoted_lose_nothing(drill):
    cluster = drill.cluster
    url = cluster.url(drill.database)
    acknowledged: list[int] = []
    stop = threading.Event()

    def acknowledged_writes() -> None:
        """A client of its own: every commit the server acknowledged must survive."""
        for n in itertools.count():
            if stop.is_set():
                return
            try:
                with psycopg.connect(url, autocommit=True, connect_timeout=2) as conn:
                    conn.execute("INSERT INTO drill_ack VALUES (%s)", [n])
                acknowledged.append(n)
            except psycopg.Error:
                stop.wait(0.05)  # a client's pause before trying again

    with _explained(drill), django_default_at(url):
        writer = threading.Thread(target=acknowledged_writes, daemon=True)
        writer.start()
        wait_until(lambda: len(acknowledged) >= 20, timeout=20, message="acknowledged writes")
        # Runs whose end committed a second before the kill: acknowledged to their worker
        # (a synchronous commit returns in milliseconds). One that commits as the kill
        # lands is visible on the primary before the standby confirms it, and may go.
        ended_before = set(
            TaskExecution.platform.filter(
                status="success", completed_at__lt=timezone.now() - timedelta(seconds=1)
            ).values_list("id", flat=True)
        )
        killed_at = cluster.kill_primary()
        acknowledged_at_kill = len(acknowledged)
        # Promoted once the beat has met the lost primary twice (an operator's decision, or
        # the operator's, takes a while): the fires due meanwhile are the gap to catch up.
        failures = drill.beat.log().count("scheduler tick failed")
        wait_until(
            lambda: drill.beat.log().count("scheduler tick failed") >= failures + 2,
            timeout=30,
            message="the beat to meet the lost primary",
        )
        promoted_at = cluster.promote()
        killed = datetime.fromtimestamp(killed_at, tz=UTC)
        first_fire = wait_until(
            _read(
                lambda: (
                    TaskExecution.platform.filter(trigger="schedule", queued_at__gt=killed)
                    .order_by("queued_at")
                    .values_list("queued_at", flat=True)
                    .first()
                )
            ),
            timeout=RTO_TARGET_SECONDS,
            interval=0.05,
            message="a fire on the promoted standby",
        )
        rto = time.time() - killed_at
        stop.set()
        writer.join(timeout=10)
        promoted = timezone.now()
        wait_until(
            lambda: (
                TaskExecution.platform.filter(
                    scheduled_at__gt=promoted + timedelta(seconds=2), status="success"
                ).count()
                >= INTERVAL_TASKS
            ),
            timeout=30,
            message="fires to resume on the new primary",
        )
        wait_until(lambda: _all_due_ended(promoted), timeout=30, message="the gap's runs to end")

        # Every write acknowledged before the kill is on the new primary.
        (present,) = cluster.standby.sql(
            "SELECT count(*) FROM drill_ack WHERE n < %s",
            (acknowledged_at_kill,),
            database=drill.database,
        )[0]
        assert present == acknowledged_at_kill
        lost = ended_before - set(
            TaskExecution.platform.filter(id__in=ended_before, status="success").values_list(
                "id", flat=True
            )
        )
        assert not lost, f"{len(lost)} runs ended before the kill are gone"
        _assert_each_second_recorded_once(until=promoted)
        before = TaskExecution.platform.filter(trigger="schedule", queued_at__lt=killed)
        last_fire_before = before.order_by("-queued_at").values_list("queued_at", flat=True)[0]
        gap = (first_fire - last_fire_before).total_seconds()
        caught_up = TaskExecution.platform.filter(
            trigger="schedule",
            scheduled_at__gt=last_fire_before,
            scheduled_at__lte=first_fire,
        ).count()
        print(
            f"\ndrill: RTO {rto:.1f}s (kill to first fire on the new primary; promoted "
            f"{promoted_at - killed_at:.1f}s after the kill), gap {gap:.1f}s without a fire, "
            f"{caught_up} fires due in the gap recorded once each, "
            f"{len(ended_before)} runs ended before the kill all present, "
            f"{acknowledged_at_kill} acknowledged writes all present, 0 doubled, "
            f"worker restarts {drill.workers.restarts}"
        )
        assert rto <= RTO_TARGET_SECONDS
