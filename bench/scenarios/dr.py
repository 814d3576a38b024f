"""dr: the disaster-recovery drill at the design's peak rate. 833 interval schedules of 1 s
(833 fires/s, catch-up `all`) through one real beat and real prefork workers on a primary
and its synchronous streaming standby (tests/pg_cluster.py, the drill's fixture); the
primary SIGKILLed under that load, the standby promoted; then what the drill asserts,
counted: RTO (kill to the first fire recorded on the new primary), the gap without a fire,
the fires due in the gap recorded once each, the runs acknowledged before the kill present,
and doubled fires (0).

The promotion comes PROMOTE_AFTER seconds after the kill: the time an operator (or
CloudNativePG, docs/deployment/kubernetes.md) takes to decide the primary is gone, which the
RTO includes and which a deployment sets, not the scheduler."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from bench import support
from bench.report import Result
from bench.scenarios.sustained import _option

NAME = "dr"
QUICK = True
DESCRIPTION = "833 fires/s on a primary + sync standby; primary SIGKILLed, standby promoted: RTO"
SCHEDULES = 833
WORKERS = 2
CONCURRENCY = 4
BEFORE_KILL_SECONDS = 20
PROMOTE_AFTER_SECONDS = 5.0
AFTER_SECONDS = 20
RTO_TARGET_SECONDS = 30.0


def _prepare(schedules: int) -> None:
    """The schedules in the benchmark database (copied to the cluster next): catch-up `all`,
    so every second the outage missed is owed a fire, and quotas sized to the load."""
    from django.db import connection
    from django.utils import timezone

    from scheduler_app.models import Tenant

    support.reset()
    created = timezone.now().replace(microsecond=0)
    support.tasks_copy(schedules, row=lambda i: ("interval", "1s", "UTC", None), created_at=created)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE scheduler_app_taskdefinition SET catchup = 'all'")
    Tenant.objects.filter(id=support.bench_tenant().id).update(
        max_runs_per_hour=10 * schedules * 3600, max_concurrent_runs=10_000
    )
    connection.close()


def _first(node, database: str, sql: str, params: tuple = ()):
    rows = node.sql(sql, params, database=database)
    return rows[0][0] if rows else None


def _drill(schedules: int, workers: int, concurrency: int) -> dict:
    from django.db import connection

    from tests.pg_cluster import pg_cluster

    _prepare(schedules)
    source = support.DATABASE_URL
    with pg_cluster(synchronous=True) as cluster:
        database = "bench_dr"
        cluster.create_database_from(source, database)
        env = {
            "DATABASE_URL": cluster.url(database),
            # bench/settings.py sets DATABASE_URL from this one in every process it starts.
            "BENCH_DATABASE_URL": cluster.url(database),
            "DATABASE_RETRY_SECONDS": "60",
            # Longer than the outage: a lease running out while the primary is away would
            # hand a run still running to a second attempt (the drill's setting too).
            "WORKER_LEASE_SECONDS": "30",
        }
        pool = [
            support.spawn(_worker_argv(i, concurrency), log_name=f"dr-w{i}", **env)
            for i in range(workers)
        ]
        time.sleep(8)  # workers up
        beat = support.spawn(
            ["-m", "celery", "-A", "project", "beat", "-S", "beat:LeaderScheduler"],
            log_name="dr-beat",
            **env,
        )
        time.sleep(BEFORE_KILL_SECONDS)
        primary, standby = cluster.primary, cluster.standby
        # Runs whose end committed a second before the kill: acknowledged to their worker.
        acknowledged = {
            row[0]
            for row in primary.sql(
                "SELECT id::text FROM scheduler_app_taskexecution WHERE status = 'success'"
                " AND completed_at < now() - interval '1 second'",
                database=database,
            )
        }
        fired_before = _first(primary, database, "SELECT count(*) FROM scheduler_app_taskexecution")
        killed_at = cluster.kill_primary()
        killed = datetime.fromtimestamp(killed_at, tz=UTC)
        time.sleep(PROMOTE_AFTER_SECONDS)
        promoted_at = cluster.promote()
        first_fire = None
        while first_fire is None and time.time() - killed_at < 120:
            first_fire = _first(
                standby,
                database,
                "SELECT min(created_at) FROM scheduler_app_taskexecution WHERE created_at > %s",
                (killed,),
            )
            if first_fire is None:
                time.sleep(0.05)
        rto = (first_fire - killed).total_seconds() if first_fire else float("inf")
        time.sleep(AFTER_SECONDS)
        support.stop(beat)
        time.sleep(10)  # let the workers drain what was fired
        for process in pool:
            support.stop(process)
        stats = _counts(standby, database, killed=killed, first_fire=first_fire)
        present = {
            row[0]
            for row in standby.sql(
                "SELECT id::text FROM scheduler_app_taskexecution WHERE status = 'success'"
                " AND id::text = ANY(%s)",
                (list(acknowledged),),
                database=database,
            )
        }
    connection.close()
    return {
        "schedules": schedules,
        "system": f"1 beat + {workers}x{concurrency} prefork workers, primary + sync standby",
        "fired_before_kill": fired_before,
        "promoted_after_s": round(promoted_at - killed_at, 1),
        "rto_s": round(rto, 1),
        **stats,
        "acknowledged_runs": len(acknowledged),
        "acknowledged_missing": len(acknowledged - present),
    }


def _worker_argv(index: int, concurrency: int) -> list[str]:
    """The sustained bench's worker (bench/scenarios/sustained.py), pointed at the cluster."""
    return [
        "-m", "celery", "-A", "project", "worker", "-Q", "critical,normal,bulk",
        "-c", str(concurrency), "-P", "prefork", "-n", f"dr{index}@%h", "-l", "WARNING",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip


def _counts(node, database: str, *, killed: datetime, first_fire) -> dict:
    """Over every fire recorded: doubled (task, instant) pairs, instants missing between a
    task's first and last fire, the gap without a fire, and the fires due in it."""
    (rows, distinct, missing, not_ended) = node.sql(
        "WITH fires AS (SELECT task_id, scheduled_at, status, lead(scheduled_at) OVER"
        "   (PARTITION BY task_id ORDER BY scheduled_at) AS next_at"
        "   FROM scheduler_app_taskexecution WHERE trigger = 'schedule')"
        " SELECT count(*), count(DISTINCT (task_id, scheduled_at)),"
        "  coalesce(sum(greatest(0, extract(epoch FROM next_at - scheduled_at)::int - 1)), 0),"
        "  count(*) FILTER (WHERE status IN ('pending', 'queued', 'running'))"
        " FROM fires",
        database=database,
    )[0]
    last_before = _first(
        node,
        database,
        "SELECT max(created_at) FROM scheduler_app_taskexecution WHERE created_at < %s",
        (killed,),
    )
    gap_due = (
        _first(
            node,
            database,
            "SELECT count(*) FROM scheduler_app_taskexecution WHERE trigger = 'schedule'"
            " AND scheduled_at > %s AND scheduled_at <= %s",
            (last_before, first_fire),
        )
        if last_before and first_fire
        else 0
    )
    gap = (first_fire - last_before).total_seconds() if last_before and first_fire else None
    return {
        "gap_s": round(gap, 1) if gap is not None else "-",
        "gap_fires_recorded": gap_due,
        "fires": rows,
        "doubled": rows - distinct,
        "missing_instants": int(missing),
        "not_ended": not_ended,
    }


def run(args: list[str]) -> Result:
    support.setup()
    schedules = _option(args, "schedules", SCHEDULES)
    result = Result(
        scenario=NAME,
        columns=[
            "schedules",
            "system",
            "fired_before_kill",
            "promoted_after_s",
            "rto_s",
            "gap_s",
            "gap_fires_recorded",
            "fires",
            "doubled",
            "missing_instants",
            "not_ended",
            "acknowledged_runs",
            "acknowledged_missing",
        ],
        targets={
            "dr": f"RTO <= {RTO_TARGET_SECONDS:.0f} s (the design: 5 minutes), 0 doubled,"
            " 0 missing instants, 0 acknowledged runs missing"
        },
        notes=[
            f"{schedules} interval schedules of 1 s (catch-up all), {BEFORE_KILL_SECONDS} s of"
            f" load, then the primary SIGKILLed and the standby promoted"
            f" {PROMOTE_AFTER_SECONDS:.0f} s later (the operator's decision time, inside the"
            f" RTO); {AFTER_SECONDS} s more load, 10 s to drain",
            "rto_s = kill to the first execution row written on the new primary; gap_s = last"
            " row written before the kill to that one; gap_fires_recorded = fires due in the"
            " gap, recorded once each (doubled counts every (task, instant) recorded twice);"
            " missing_instants = seconds with no fire between a task's first and last;"
            " acknowledged = runs whose success committed 1 s before the kill, looked up on"
            " the new primary; not_ended = rows still pending/queued/running after the drain",
        ],
    )
    result.add(**_drill(schedules, WORKERS, CONCURRENCY))
    return result
