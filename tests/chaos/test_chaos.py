"""Faults a real cluster sees, injected into real processes: each case asserts 0 runs
doubled, 0 recorded runs that never end, and fires resumed (tests/chaos/harness.py says how
each is measured). Short versions here; `make chaos` runs the long ones and writes
bench/results/chaos.md.

The long versions hold each fault longer and fire more one-second tasks, and give the
workers the slots that load needs (`scaled`): every task fires each second whatever is still
waiting, so a load above the workers' capacity (tasks x handler seconds > slots) grows a
backlog that never drains, and the case would measure that, not the fault."""

from __future__ import annotations

import json
import signal
import time

import pytest
from django.conf import settings as django_settings

from beat.lock import LeaderLock
from scheduler_app.models import ExecutionLoss
from scheduler_app.redis_client import get_redis, redis_key
from tests.chaos.harness import chaos_stack, scaled
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

LOCK_TTL = 1.5


def _observer() -> LeaderLock:
    return LeaderLock(
        get_redis(),
        key_prefix=django_settings.SCHEDULER["REDIS_KEY_PREFIX"],
        node_id="observer",
        ttl_seconds=LOCK_TTL,
    )


def _node_status(node: str) -> dict | None:
    raw = get_redis().get(redis_key(f"scheduler:node:{node}"))
    return json.loads(raw) if raw else None


def test_a_leader_frozen_past_its_ttl_stops_firing_when_it_wakes(
    tenant, tmp_path, settings, record_case
):
    with chaos_stack(tenant, tmp_path, settings, tasks=int(scaled(2, 10))) as stack:
        stack.start_beat("a")
        stack.start_beat("b")
        stack.start_worker("w1")
        observer = _observer()
        leader = wait_until(observer.current_leader, timeout=30, message="a leader")
        stack.wait_for_runs(3)
        frozen = stack.beats[leader.node]
        frozen.kill(signal.SIGSTOP)
        stack.fault()
        successor = wait_until(
            lambda: (info := observer.current_leader()) and info.node != leader.node and info,
            timeout=LOCK_TTL + 10,
            message="the standby to take the lock",
        )
        assert successor.epoch == leader.epoch + 1
        # Frozen past its lease (the successor took the lock after its TTL), and the fires go
        # on under the successor: when it wakes, its trust window is long gone, and a fire it
        # made would double one of those.
        stack.wait_for_runs(3)
        stack.hold_fault(20)
        frozen.kill(signal.SIGCONT)
        stack.heal()
        frozen.wait_for_log("lost leadership", timeout=15)
        stack.wait_for_resume()
        # It came back as a standby and stays one: the lock is the successor's.
        status = wait_until(
            lambda: (s := _node_status(leader.node)) and s["reported_at"] > time.time() - 1 and s,
            timeout=10,
            message="the woken node to report",
        )
        assert status["role"] == "standby"
        assert observer.current_leader().node == successor.node
        result = record_case(
            stack.settle(case="leader-sigstop", fault=f"leader SIGSTOPped > {LOCK_TTL} s TTL")
        )
    result.assert_clean()


def test_redis_killed_and_restarted_empty(tenant, tmp_path, settings, record_case):
    with chaos_stack(tenant, tmp_path, settings, tasks=int(scaled(2, 10))) as stack:
        stack.start_beat("a")
        stack.start_beat("b")
        stack.start_worker("w1")
        stack.wait_for_runs(3)
        stack.redis.kill()
        stack.fault()
        # Down until both beats have found Redis gone (the leader's renewal, the standby's
        # try for the lock), and in the long version for 10 s more.
        for beat in stack.beats.values():
            stack.wait_until_logged(beat, "renewal failed", "leader lock acquire failed")
        stack.hold_fault(10)
        stack.redis.start()  # same port, nothing kept: the queues, lock and registry are gone
        stack.heal()
        stack.wait_for_resume()
        stack.wait_for_runs(int(scaled(5, 30)))
        result = record_case(
            stack.settle(case="redis-restart-empty", fault="Redis SIGKILLed, restarted empty")
        )
    result.assert_clean()


def test_a_worker_sigkilled_in_the_middle_of_a_batch(tenant, tmp_path, settings, record_case):
    # Several tasks of one tenant due each second ring as batch messages (one per worker
    # process); each run stays busy a while so the kill catches a batch in flight.
    tasks = int(scaled(6, 12))
    slots = int(scaled(2, 6))  # each: the survivor alone carries tasks x 0.25 s per second
    with chaos_stack(tenant, tmp_path, settings, tasks=tasks, handler_seconds=0.25) as stack:
        stack.start_beat("a")
        stack.start_worker("victim", concurrency=slots, wait=False)
        stack.start_worker("survivor", concurrency=slots, wait=False)
        stack.wait_for_workers()
        stack.wait_for_runs(tasks)
        victim_host = f"victim-{django_settings.RUN_ID}"
        wait_until(
            lambda: (
                stack.executions()
                .filter(status="running", worker_id__startswith=victim_host)
                .count()
                >= 2
            ),
            timeout=30,
            interval=0.05,
            message="the victim mid-batch",
        )
        stack.kill_worker("victim")
        stack.fault()
        stack.heal()
        stack.wait_for_resume()
        stack.wait_for_runs(int(scaled(tasks * 2, tasks * 20)), timeout=scaled(60, 120))
        result = record_case(
            stack.settle(case="worker-sigkill-mid-batch", fault="worker SIGKILLed mid-batch")
        )
        # Counted once every run has ended: the victim's runs are re-queued when the reaper
        # finds it dead, which may come after the survivor's first dozen runs.
        runs = stack.executions().values_list("id", flat=True)
        lost = ExecutionLoss.platform.filter(execution_id__in=list(runs)).count()
    assert lost >= 1, "the kill should have caught runs in flight"
    result.assert_clean()


def _terminate_every_other_connection() -> int:
    """pg_terminate_backend on every session of the test database but this one: the beats',
    the workers' pool processes', mid-transaction or idle."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def _other_sessions() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def test_every_postgresql_connection_terminated_under_load(tenant, tmp_path, settings, record_case):
    with chaos_stack(
        tenant, tmp_path, settings, tasks=int(scaled(4, 10)), handler_seconds=0.2
    ) as stack:
        stack.start_beat("a")
        stack.start_beat("b")
        stack.start_worker("w1", concurrency=int(scaled(2, 6)))
        stack.wait_for_runs(5)
        stack.fault()
        terminated = 0
        for _ in range(int(scaled(3, 15))):
            terminated += _terminate_every_other_connection()
            # The next round once the stack has connected again (it kills those sessions).
            wait_until(_other_sessions, timeout=30, interval=0.1, message="sessions back")
        stack.heal()
        stack.wait_for_resume()
        stack.wait_for_runs(int(scaled(8, 60)), timeout=scaled(60, 120))
        result = record_case(
            stack.settle(
                case="postgres-connections-killed",
                fault=f"pg_terminate_backend on every session ({terminated} killed)",
            )
        )
    assert terminated >= 3
    result.assert_clean()


def test_a_worker_cut_off_from_redis_longer_than_its_heartbeat(
    tenant, tmp_path, settings, record_case
):
    from tests.tcp_proxy import TcpProxy

    with chaos_stack(
        tenant, tmp_path, settings, tasks=int(scaled(2, 4)), handler_seconds=0.5
    ) as stack:
        proxy = TcpProxy(upstream_port=stack.redis.port)
        try:
            link = proxy.url()
            # The doorbells wait in Redis for the worker: none is lost. A requeue grace
            # shorter than the cut (the suite's 5 s) would ring every waiting run again each
            # 5 s, and the worker would come back to six doorbells a run to drop; production
            # waits 300 s, longer than this cut, so the long version waits longer than it too.
            stack.start_beat("a", SCHEDULER_REQUEUE_GRACE=str(int(scaled(5, 60))))
            # Slots to spare: after the cut the worker drains the runs that waited for it.
            stack.start_worker(
                "w1",
                concurrency=int(scaled(2, 8)),
                REDIS_URL=link,
                CELERY_BROKER_URL=link,
                CELERY_RESULT_BACKEND=link,
            )
            stack.wait_for_runs(4)
            proxy.cut()
            stack.fault()
            # Heartbeats every 0.5 s: cut until the beat has declared the worker dead for the
            # heartbeats it missed (and in the long version for 30 s more).
            stack.wait_until_logged(stack.beats["a"], "missed its heartbeats")
            stack.hold_fault(30)
            proxy.heal()
            stack.heal()
            stack.wait_for_resume()
            stack.wait_for_runs(int(scaled(4, 20)))
            result = record_case(
                stack.settle(
                    case="worker-cut-from-redis",
                    fault="worker's Redis link cut (TCP proxy) > 2 heartbeats",
                )
            )
        finally:
            proxy.close()
    result.assert_clean()


def _fill(server) -> int:
    """Write junk until Redis refuses writes (maxmemory with noeviction); returns the keys."""
    import redis

    client, written = server.client(), 0
    try:
        while True:
            client.set(f"chaos:junk:{written}", "x" * 50_000)
            written += 1
    except redis.ResponseError as error:
        assert "maxmemory" in str(error)
    return written


def test_redis_at_maxmemory_answers_503_never_500(tenant, api, tmp_path, settings, record_case):
    from tests.chaos.harness import this_process_publishes_to
    from tests.factories import make_task

    with (
        chaos_stack(
            tenant,
            tmp_path,
            settings,
            tasks=int(scaled(2, 10)),
            redis_args=("--maxmemory", "8mb"),
        ) as stack,
        this_process_publishes_to(stack.redis.url),
    ):
        stack.start_beat("a")
        stack.start_worker("w1", concurrency=int(scaled(2, 4)))
        stack.wait_for_runs(3)
        manual = make_task(
            tenant,
            name="manual",
            schedule={"type": "manual"},
            handler={"type": "python", "callable": "ledger"},
            parameters={"path": str(stack.ledger)},
        )
        stack.tasks.append(manual)
        running = stack.executions().filter(status="success").first()
        junk = _fill(stack.redis)
        stack.fault()
        spec = {"name": "created-while-full", "schedule": {"type": "manual"}}
        spec["handler"] = {"type": "python", "callable": "noop"}
        calls = [
            ("get", "/api/v1/tasks", None),
            ("post", "/api/v1/tasks", spec),
            ("post", f"/api/v1/tasks/{manual.id}/trigger", {}),
            ("get", "/api/v1/executions", None),
            ("get", f"/api/v1/executions/{running.id}", None),
            ("get", f"/api/v1/executions/{running.id}/logs?format=text", None),
            ("get", "/api/v1/admin/queues", None),
            ("get", "/api/v1/admin/workers", None),
            ("get", "/api/v1/admin/scheduler/status", None),
            ("get", "/api/v1/admin/metrics", None),
        ]
        answers = {}
        for method, path, body in calls:
            if body is None:
                response = getattr(api, method)(path)
            else:
                response = getattr(api, method)(path, body, format="json")
            answers[f"{method.upper()} {path}"] = response.status_code
        trigger = answers[f"POST /api/v1/tasks/{manual.id}/trigger"]
        recorded = stack.executions().filter(task=manual).count()
        # Redis stays full a while: until the beat has recorded two rounds of fires whose
        # doorbells cannot go out (the long version, 20 s more); nothing the stack does may
        # double or drop a run meanwhile.
        wait_until(
            lambda: (
                stack.executions().filter(created_at__gt=stack.fault_at).count()
                >= 2 * len(stack.tasks)
            ),
            timeout=30,
            message="fires recorded while Redis is full",
        )
        stack.hold_fault(20)
        stack.redis.client().delete(*(f"chaos:junk:{i}" for i in range(junk)))
        stack.heal()
        stack.wait_for_resume()
        wait_until(
            lambda: stack.executions().filter(task=manual, status="success").count() == recorded,
            timeout=30,
            message="the run triggered while Redis was full to run",
        )
        result = record_case(
            stack.settle(case="redis-maxmemory", fault="Redis full (maxmemory, noeviction)")
        )
    print(answers)
    assert all(code < 500 or code == 503 for code in answers.values()), answers
    # Not a silent loss: an accepted trigger recorded its run (it ran above); a refused one
    # recorded nothing.
    assert recorded == (1 if trigger < 300 else 0), (trigger, recorded)
    result.assert_clean()


def test_postgresql_itself_stopped_and_started_again(tmp_path, settings, record_case):
    from tests.chaos.embedded import embedded_chaos_stack

    with embedded_chaos_stack(
        tmp_path, settings, tasks=int(scaled(2, 6)), handler_seconds=0.2
    ) as stack:
        stack.start_beat("a")
        stack.start_worker("w1", concurrency=int(scaled(2, 6)))
        stack.wait_for_runs(3)
        stack.fault()
        stack.database.stop()
        # Down until the beat has failed three rounds (it waits 1 s after a failed tick), the
        # long version 20 s more.
        stack.wait_until_logged(stack.beats["a"], "scheduler tick failed", times=3)
        stack.hold_fault(20)
        stack.database.start()  # the same port, the same data
        stack.heal()
        stack.wait_for_resume()
        stack.wait_for_runs(int(scaled(5, 30)))
        # Nothing supervises the beat here: it must ride out the outage by itself.
        beat_alive = stack.beats["a"].alive()
        result = record_case(
            stack.settle(
                case="postgres-restart",
                fault="PostgreSQL stopped (fast shutdown), started again",
            )
        )
    assert beat_alive
    result.assert_clean()
