"""DAG engine vs plain Celery: inter-task latency over a 100-step chain, and the wall time
of a 500-wide fan-out/fan-in, each beside Celery doing the same shape (a chain; a chord).

Uses a fresh PostgreSQL database (BENCH_DATABASE_URL's server, default local postgres),
a free Redis db number, and the stack `make run` starts (bench/stack_defaults.py: one prefork
worker, with the bench's plain Celery tasks included, and one beat) that serves both systems in
the same run; --departures=... adds the same measures on a stack with those departures.

    python -m bench dag [--profile]

--profile samples the worker through the measured DAG chains, waiting threads included
(where a hop's wall time goes): bench/results/profiles/dag-chain.md.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import statistics
import sys
import time
import uuid

from bench.profiling import sampled
from bench.report import Result

NAME = "dag"
QUICK = False
DESCRIPTION = "DAG inter-task latency (100-step chain) and 500-wide fan-out/fan-in vs Celery"
CHAIN_LENGTH = 100
WIDTH = 500


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _maintenance_url(server: str) -> str:
    return server.rsplit("/", 1)[0] + "/postgres"


def _setup_environment() -> tuple[str, str, tuple[int, int]]:
    import psycopg

    server = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    name = f"bench_dag_{uuid.uuid4().hex[:8]}"
    # Before anything imports project.settings: it reads the environment once.
    os.environ["DATABASE_URL"] = server.rsplit("/", 1)[0] + f"/{name}"
    base_redis = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    os.environ["BENCH_REDIS_BASE"] = base_redis
    from project.settings.test_redis import claim_redis_db

    redis_url, number = claim_redis_db(base_redis, owner=f"bench-dag-{name}")
    # The live log tails' db, apart from the broker's as in every deployment.
    live_logs_url, live_number = claim_redis_db(base_redis, owner=f"bench-dag-{name}")
    os.environ["LIVE_LOGS_REDIS_URL"] = live_logs_url
    try:
        # The server's maintenance database: BENCH_DATABASE_URL may name one not yet made.
        with psycopg.connect(_maintenance_url(server), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except BaseException:
        from project.settings.test_redis import release_redis_db

        for claimed in (number, live_number):
            release_redis_db(base_redis, claimed, owner=f"bench-dag-{name}")
        raise
    os.environ["REDIS_URL"] = redis_url
    os.environ["CELERY_BROKER_URL"] = redis_url
    os.environ["CELERY_RESULT_BACKEND"] = redis_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "project.settings"
    os.environ["SCHEDULER_REDIS_PREFIX"] = f"{name}:"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    # Importing test_redis imported the settings package, which read REDIS_URL and the key
    # prefix before they were set above: forget it, so django.setup() reads them afresh.
    # (Otherwise this process, its worker and its beat share db 0 and the default "sched:"
    # prefix with every other local stack: leader lock, fleet registry, fairness sets.)
    for module in [m for m in sys.modules if m.split(".")[:2] == ["project", "settings"]]:
        del sys.modules[module]
    return name, server, (number, live_number)


def _teardown(name: str, server: str, numbers: tuple[int, int]) -> None:
    import psycopg
    from django.db import connections

    from project.settings.test_redis import release_redis_db

    connections.close_all()
    with psycopg.connect(_maintenance_url(server), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    for number in numbers:
        release_redis_db(
            os.environ.get("BENCH_REDIS_BASE", "redis://127.0.0.1:6379/0"),
            number,
            owner=f"bench-dag-{name}",
        )


def _stack_env(combo) -> dict[str, str]:
    """This process's environment (its own database, Redis db and key prefix, set by
    `_setup_environment`) with nothing of the bench's in it: the product's defaults, but for
    ``combo``'s departures (bench/stack_defaults.py)."""
    from bench import stack_defaults
    from tests.processes import ROOT

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    for key, value in stack_defaults.stack_env(combo).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _start_worker(combo):
    """`make run`'s worker, with the bench's plain Celery tasks included beside the product's
    (`--include bench.celery_tasks`: the comparison's chain and chord run on it)."""
    from bench import stack_defaults
    from tests.processes import _start

    argv = stack_defaults.worker_argv(
        combo, name=f"bench-dag-{uuid.uuid4().hex[:6]}@%h", include="bench.celery_tasks"
    )
    worker = _start("bench-dag-worker", [sys.executable, *argv], _stack_env(combo))
    worker.wait_for_log("ready", timeout=60)  # logged at INFO: a WARNING worker never says it
    return worker


def _start_beat(combo):
    """The beat leader, as `make run` starts it: fair dispatch holds back a tenant's
    doorbells beyond FAIR_INFLIGHT_PER_TENANT (a 500-wide fan-out) as pending rows the leader
    offers again."""
    from bench import stack_defaults
    from tests.processes import _start

    env = {**_stack_env(combo), "SCHEDULER_NODE_ID": f"bench-dag-{uuid.uuid4().hex[:6]}"}
    return _start("bench-dag-beat", [sys.executable, *stack_defaults.beat_argv(combo)], env)


def _wait_run(run_id, timeout: float = 600):
    from dags.models import DagRun

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = DagRun.platform.get(id=run_id)
        if run.status not in ("running", "queued"):
            return run
        time.sleep(0.05)
    raise RuntimeError(f"DAG run {run_id} did not finish in {timeout}s")


def _dag_chain(tenant) -> list[tuple[float, float, float]]:
    """A chain of CHAIN_LENGTH no-op nodes, run to its end: per hop (ms), upstream finish ->
    downstream start, and that split at the downstream run's row (written by the upstream's
    finish, which hands the next node to the same worker): finish -> row, row -> start."""
    from dags.models import DagNodeState
    from dags.services.definitions import dag_create
    from dags.services.runs import dag_trigger
    from scheduler_app.models import TaskExecution

    noop = {"type": "python", "callable": "noop"}
    tasks = [{"id": "s0", "handler": noop}] + [
        {"id": f"s{i}", "handler": noop, "depends_on": [f"s{i - 1}"]}
        for i in range(1, CHAIN_LENGTH)
    ]
    dag = dag_create(tenant=tenant, raw={"dag": f"chain-{uuid.uuid4().hex[:6]}", "tasks": tasks})
    run = _wait_run(dag_trigger(dag=dag).id)
    assert run.status == "success", run.status
    nodes = dict(DagNodeState.objects.filter(run=run).values_list("node_id", "execution_id"))
    execs = {e.id: e for e in TaskExecution.platform.filter(id__in=nodes.values())}
    ordered = [execs[nodes[f"s{i}"]] for i in range(CHAIN_LENGTH)]
    return [
        (
            (b.started_at - a.completed_at).total_seconds() * 1000,
            (b.created_at - a.completed_at).total_seconds() * 1000,
            (b.started_at - b.created_at).total_seconds() * 1000,
        )
        for a, b in itertools.pairwise(ordered)
    ]


ACCOUNTED_HOPS = 30


def _hop_accounting(tenant) -> str:
    """The work of one DAG hop, counted: this process runs a chain of ACCOUNTED_HOPS + 1 no-op
    nodes itself (no broker, no other worker: what the worker's process does per hop when
    the finishing node hands it the next one), with libpq's trace on its PostgreSQL
    connection (round trips = ReadyForQuery messages; statements = CommandComplete, BEGIN
    and COMMIT apart), Redis's command statistics, and the CPU of this process, of its
    PostgreSQL backend and of the Redis server. Run before the worker and beat start, so
    nothing else talks to Redis or this database."""
    import resource
    import tempfile

    import psutil
    from django.db import connection
    from psycopg.pq import Trace

    from dags.engine.dispatch import HandOn
    from dags.models import DagNodeState
    from dags.services.definitions import dag_create
    from dags.services.runs import dag_trigger
    from scheduler_app.redis_client import get_redis
    from workers.runner import execution_run

    noop = {"type": "python", "callable": "noop"}
    tasks = [{"id": "s0", "handler": noop}] + [
        {"id": f"s{i}", "handler": noop, "depends_on": [f"s{i - 1}"]}
        for i in range(1, ACCOUNTED_HOPS + 1)
    ]
    dag = dag_create(tenant=tenant, raw={"dag": f"hops-{uuid.uuid4().hex[:6]}", "tasks": tasks})
    run = dag_trigger(dag=dag)
    first = DagNodeState.objects.get(run=run, node_id="s0").execution_id
    redis = get_redis()

    def redis_commands() -> int:
        stats = redis.info("commandstats")
        return sum(int(value["calls"]) for name, value in stats.items() if name != "info")

    def redis_cpu() -> float:
        info = redis.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def own_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = psutil.Process(cursor.fetchone()[0])
    pgconn = connection.connection.pgconn
    nodes = 0
    with tempfile.TemporaryFile() as trace:
        before = (own_cpu(), sum(backend.cpu_times()[:2]), redis_cpu(), redis_commands())
        started = time.perf_counter()
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS)  # "F|B <tab> length <tab> message"
        try:
            hand_on = HandOn.for_worker(worker_id="bench-hops@host", tier="normal")
            execution_run(
                execution_id=str(first),
                worker_id=hand_on.worker_id,
                queue="normal",
                hand_on=hand_on,
            )
            nodes += 1
            while (follow := hand_on.take()) is not None:
                execution_run(execution_id=follow, worker_id=hand_on.worker_id, hand_on=hand_on)
                nodes += 1
        finally:
            pgconn.untrace()
        wall = time.perf_counter() - started
        after = (own_cpu(), sum(backend.cpu_times()[:2]), redis_cpu(), redis_commands())
        trace.seek(0)
        messages = [line.split(b"\t") for line in trace.read().splitlines()]
    if nodes != ACCOUNTED_HOPS + 1:
        return f"hop accounting: the chain ran {nodes} nodes in this process, not all of them"
    round_trips = sum(1 for m in messages if m[:1] == [b"B"] and m[2:3] == [b"ReadyForQuery"])
    completes = [
        m[3].strip() for m in messages if m[:1] == [b"B"] and m[2:3] == [b"CommandComplete"]
    ]
    commits = sum(1 for tag in completes if tag == b'"COMMIT"')
    statements = sum(1 for tag in completes if tag not in (b'"BEGIN"', b'"COMMIT"'))
    process, backend_cpu, redis_used, commands = (b - a for a, b in zip(before, after, strict=True))
    return (
        f"one DAG hop's work, counted over {nodes} no-op nodes run back to back in one process"
        f" (no broker): {wall * 1000 / nodes:.1f} ms wall; {round_trips / nodes:.1f} round"
        f" trips to PostgreSQL ({statements / nodes:.1f} statements, {commits / nodes:.1f}"
        f" commits); {commands / nodes:.1f} Redis commands; CPU {process * 1000 / nodes:.2f} ms"
        f" in the process, {backend_cpu * 1000 / nodes:.2f} ms in its PostgreSQL backend,"
        f" {redis_used * 1000 / nodes:.2f} ms in Redis"
    )


def _dag_fan(tenant, *, mapped: bool) -> float:
    from dags.services.definitions import dag_create
    from dags.services.runs import dag_trigger

    noop = {"type": "python", "callable": "noop"}
    echo = {"type": "python", "callable": "echo"}
    if mapped:
        tasks = [
            {"id": "start", "handler": noop},
            {"id": "fan", "handler": echo, "depends_on": ["start"], "map_over": list(range(WIDTH))},
            {"id": "join", "handler": noop, "depends_on": ["fan"]},
        ]
    else:
        tasks = [
            {"id": "start", "handler": noop},
            *({"id": f"w{i}", "handler": noop, "depends_on": ["start"]} for i in range(WIDTH)),
            {"id": "join", "handler": noop, "depends_on": [f"w{i}" for i in range(WIDTH)]},
        ]
    dag = dag_create(tenant=tenant, raw={"dag": f"fan-{uuid.uuid4().hex[:6]}", "tasks": tasks})
    started = time.monotonic()
    run = _wait_run(dag_trigger(dag=dag).id)
    elapsed = time.monotonic() - started
    assert run.status == "success", run.status
    return elapsed


def _celery_wait(key: str, count: int, timeout: float = 600) -> dict[int, tuple[float, float]]:
    from scheduler_app.redis_client import get_redis

    deadline = time.monotonic() + timeout
    redis = get_redis()
    while time.monotonic() < deadline:
        if redis.hlen(key) >= count:
            break
        time.sleep(0.02)
    raw = redis.hgetall(key)
    return {
        int(k): tuple(float(x) for x in str(v).split(":"))  # type: ignore[misc]
        for k, v in raw.items()
    }


def _celery_chain() -> list[float]:
    from celery import chain

    from bench.celery_tasks import plain_step

    key = f"bench:chain:{uuid.uuid4().hex}"
    chain(*(plain_step.si(key, i).set(queue="normal") for i in range(CHAIN_LENGTH)))()
    times = _celery_wait(key, CHAIN_LENGTH)
    return [(times[i + 1][0] - times[i][1]) * 1000 for i in range(CHAIN_LENGTH - 1)]


def _celery_chord() -> float:
    from celery import chord

    from bench.celery_tasks import plain_done, plain_step

    key = f"bench:chord:{uuid.uuid4().hex}"
    started = time.monotonic()
    chord(plain_step.si(key, i).set(queue="normal") for i in range(WIDTH))(
        plain_done.si(key).set(queue="normal")
    )
    _celery_wait(key, WIDTH + 1)
    return time.monotonic() - started


def run(args: list[str]) -> Result:
    name, server, numbers = _setup_environment()
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    try:
        assert settings.DATABASES["default"]["NAME"] == name, "benchmark must use its own database"
        call_command("migrate", verbosity=0)
        from scheduler_app.services.tenants import tenant_create_with_admin

        tenant, _ = tenant_create_with_admin(slug="bench", username="bench", password="bench-pw-1")
    except BaseException:
        _teardown(name, server, numbers)
        raise
    from bench import stack_defaults

    worker = beat = None
    result = Result(
        scenario=NAME,
        columns=["shape", "system", "samples", "p50_ms", "p99_ms", "max_ms", "wall_s"],
        targets={
            "inter-task latency": "p50 <= 20 ms, p99 <= 100 ms",
            "500-wide fan-out/fan-in": "within 2x plain Celery's chord wall time",
        },
    )
    result.notes.append(stack_defaults.defaults_note())
    try:
        hop_work = _hop_accounting(tenant)
        result.notes.append(hop_work)
        for combo in stack_defaults.departure_rows(args):
            worker = _start_worker(combo)
            beat = _start_beat(combo)
            _measure(result, tenant, combo, worker, profiled="--profile" in args)
            beat.stop(timeout=10)
            worker.stop()
            worker = beat = None
    finally:
        if beat is not None:
            beat.stop(timeout=10)
        if worker is not None:
            worker.stop()
        _teardown(name, server, numbers)
    return result


def _measure(result: Result, tenant, combo, worker, *, profiled: bool) -> None:
    """The chain's hops and the fan-out's wall time, DAG and plain Celery, on one stack."""
    from bench import stack_defaults

    count, concurrency = stack_defaults.worker_count_and_concurrency(combo)

    def system(name: str) -> str:
        return stack_defaults.label(name, combo)

    _celery_chain()  # warm both paths up (pool processes, connections)
    _dag_chain(tenant)
    with (
        sampled({"worker": [worker.pid]}, name="dag-chain", idle=True, through="run_execution")
        if profiled
        else contextlib.nullcontext()
    ) as profile:
        hops = _dag_chain(tenant) + _dag_chain(tenant)
    dag_lat = [hop[0] for hop in hops]
    if profile is not None:
        result.notes += profile.notes
    celery_lat = _celery_chain() + _celery_chain()
    for name, values in (("DAG engine", dag_lat), ("plain Celery chain", celery_lat)):
        result.add(
            shape=f"chain of {CHAIN_LENGTH} (x2)",
            system=system(name),
            samples=len(values),
            p50_ms=statistics.median(values),
            p99_ms=_percentile(values, 0.99),
            max_ms=max(values),
        )
    celery_chord = min(_celery_chord() for _ in range(2))
    dag_nodes = min(_dag_fan(tenant, mapped=False) for _ in range(2))
    dag_mapped = min(_dag_fan(tenant, mapped=True) for _ in range(2))
    result.add(
        shape=f"{WIDTH}-wide fan-out/in", system=system("plain Celery chord"), wall_s=celery_chord
    )
    result.add(shape=f"{WIDTH}-wide fan-out/in", system=system("DAG, 500 nodes"), wall_s=dag_nodes)
    result.add(
        shape=f"{WIDTH}-wide fan-out/in", system=system("DAG, map_over (chord)"), wall_s=dag_mapped
    )
    result.notes.append(
        f"{system('stack')}: {count} prefork worker(s) of concurrency {concurrency}, and the"
        " beat leader (fair dispatch "
        "offers held-back doorbells again), same machine, same run; "
        "latency = downstream start - upstream end (DAG: the handler's start and the "
        "finish, as recorded in PostgreSQL; Celery: time.time() in the task); "
        "wall = best of 2"
    )
    result.notes.append(
        "DAG hop, p50 of its parts: upstream finish -> downstream row"
        f" {statistics.median(hop[1] for hop in hops):.1f} ms (the finish's"
        " transaction), downstream row -> its handler's start"
        f" {statistics.median(hop[2] for hop in hops):.1f} ms (commit, claim, start"
        " bookkeeping, in the same worker process)"
    )
    result.notes.append(
        f"fan-out ratio DAG/Celery: nodes {dag_nodes / celery_chord:.2f}x, "
        f"map_over {dag_mapped / celery_chord:.2f}x"
    )
