"""failover: SIGKILL the leading beat under load; gap until firing resumes, fires missed,
fires doubled.

Two real beats, `make run`'s command (bench/stack_defaults.py; default lock
settings: TTL 1.5 s, renewed every 0.5 s, standby tries every 0.25 s) fire 833 interval
schedules of 1 s (833 fires/s). The leader is killed with SIGKILL mid-run. Every schedule's
fires over the whole window are then checked against what it should have fired.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

from bench import stack_defaults, support
from bench.report import Result

NAME = "failover"
QUICK = True
DESCRIPTION = "SIGKILL the leader at 833 fires/s: takeover gap, fires missed, fires doubled"
SCHEDULES = 833
NOOP_EVERY_SECOND = {
    "schedule": {"type": "interval", "expression": "1s"},
    "handler": {"type": "python", "callable": "noop"},
}
STRESS_SECONDS = 60.0
RING_AHEAD_SECONDS = 0.5  # SCHEDULER_FIRE_AHEAD_SECONDS's default: fires are recorded so early
BEFORE_KILL = 10.0
AFTER_KILL = 10.0


def _leader(client) -> tuple[str, float] | None:
    info = client.hgetall("bench:scheduler:leader-info")
    if not client.get("bench:scheduler:leader") or not info:
        return None
    return info[b"node"].decode(), float(info[b"since"])


def _start_beats(client, combo: stack_defaults.Combo) -> dict:
    # No worker consumes here: with fair dispatch on (the default) the leader holds all but
    # the first FAIR_INFLIGHT_PER_TENANT of the tenant's doorbells back as pending, so the
    # doorbells are counted only with the `no-fairness` departure.
    beats = {
        node: stack_defaults.start_beat(combo, log_name=f"failover-{node}", SCHEDULER_NODE_ID=node)
        for node in ("alpha", "beta")
    }
    deadline = time.time() + 30
    while _leader(client) is None and time.time() < deadline:
        time.sleep(0.05)
    return beats


def _load():
    support.reset()
    tasks = support.tasks_create(SCHEDULES, spec=NOOP_EVERY_SECOND)
    return tasks[0].created_at.replace(microsecond=0)  # fires on the whole seconds after it


def _one_kill(kills: int, combo: stack_defaults.Combo) -> dict:
    from django.db import connection
    from django.utils import timezone

    created = _load()
    client = support.redis()
    beats = _start_beats(client, combo)
    try:
        time.sleep(BEFORE_KILL)
        window_start = timezone.now()
        leader, _ = _leader(client)
        killed_at = time.time()
        os.killpg(beats[leader].pid, signal.SIGKILL)
        takeover = None
        while time.time() < killed_at + AFTER_KILL:
            current = _leader(client)
            if takeover is None and current and current[0] != leader:
                takeover = current[1] - killed_at
            time.sleep(0.02)
        window_end = timezone.now() - timedelta(seconds=3)
    finally:
        for process in beats.values():
            support.stop(process)
    table = "scheduler_app_taskexecution"
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*), count(DISTINCT (task_id, scheduled_at)) FROM {table} "
            "WHERE scheduled_at >= %s AND scheduled_at <= %s",
            [window_start, window_end],
        )
        recorded, distinct = cursor.fetchone()
        cursor.execute(
            f"SELECT extract(epoch FROM created_at) FROM {table} WHERE created_at >= %s "
            "ORDER BY created_at",
            [window_start],
        )
        record_times = [float(row[0]) for row in cursor.fetchall()]
        # How late the fires due in the 3 s after the kill were recorded, against the instant
        # a healthy leader records them (their due time less the ring-ahead).
        cursor.execute(
            f"SELECT max(extract(epoch FROM created_at - scheduled_at)) FROM {table} "
            "WHERE scheduled_at > to_timestamp(%s) AND scheduled_at <= to_timestamp(%s)",
            [killed_at, killed_at + 3],
        )
        worst_delay = cursor.fetchone()[0]
    seconds = int((window_end - window_start).total_seconds())
    # Interval fires land on whole seconds from `created`; count those inside the window.
    first = created + timedelta(seconds=int((window_start - created).total_seconds()) + 1)
    expected_per_task = sum(
        1 for k in range(seconds + 2) if first + timedelta(seconds=k) <= window_end
    )
    expected = expected_per_task * SCHEDULES
    after_kill = [t for t in record_times if t >= killed_at]
    gaps = [b - a for a, b in itertools.pairwise(record_times)]
    from scheduler_app.ringing.publish import RUN_BATCH_TASK, RUN_EXECUTION_TASK

    rung: list[str] = []
    for queue in ("critical", "normal", "bulk"):
        for message in client.lrange(queue, 0, -1):
            envelope = json.loads(message)
            task = envelope["headers"].get("task")
            if task not in (RUN_EXECUTION_TASK, RUN_BATCH_TASK):
                continue  # housekeeping tasks share the tier queues; only doorbells count
            body = json.loads(base64.b64decode(envelope["body"]))
            rung.extend(body[0][0] if task == RUN_BATCH_TASK else [body[0][0]])
    row_ids = _row_ids(until=window_end)
    doorbells_counted = stack_defaults.NO_FAIRNESS in combo
    return {
        "stack": stack_defaults.label("2 beats", combo),
        "kill": kills,
        "takeover_s": round(takeover, 3) if takeover is not None else "none",
        "first_fire_after_kill_s": round(after_kill[0] - killed_at, 3) if after_kill else "-",
        "max_record_gap_s": round(max(gaps), 3) if gaps else "-",
        "late_after_kill_s": (
            round(max(0.0, float(worst_delay) + RING_AHEAD_SECONDS), 3)
            if worst_delay is not None
            else "-"
        ),
        "expected": expected,
        "recorded": distinct,
        "missed": expected - distinct,
        "doubled_rows": recorded - distinct,
        "rows_without_doorbell": len(row_ids - set(rung)) if doorbells_counted else "n/a",
        "extra_doorbells": len(rung) - len(set(rung)) if doorbells_counted else "n/a",
    }


def _stress_round() -> str:
    """The same load for STRESS_SECONDS while busy loops keep every core busy: how often the
    lead moved (it must not, or once at most), and fires doubled."""
    from django.db import connection

    _load()
    client = support.redis()
    beats = _start_beats(client, stack_defaults.DEFAULTS)
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    epoch_before = int(client.hget("bench:scheduler:leader-info", "epoch") or 0)
    try:
        time.sleep(STRESS_SECONDS)
    finally:
        epoch_after = int(client.hget("bench:scheduler:leader-info", "epoch") or 0)
        for burner in burners:
            burner.kill()
            burner.wait()
        for process in beats.values():
            support.stop(process)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) - count(DISTINCT (task_id, scheduled_at)) "
            "FROM scheduler_app_taskexecution"
        )
        doubled = cursor.fetchone()[0]
    return (
        f"under stress ({len(burners)} busy loops, one per core, for {STRESS_SECONDS:.0f} s,"
        f" same load): the lead moved {epoch_after - epoch_before} time(s), doubled rows"
        f" {doubled} (target: at most once, 0 doubled)"
    )


def _row_ids(*, until) -> set[str]:
    """The rows due by `until` (the counted window's end): the surviving beat is stopped with
    SIGTERM at the round's end, which may land between a batch's commit and its ring (its
    successor's takeover rings such rows), so rows due after the window are not judged."""
    from scheduler_app.models import TaskExecution

    rows = TaskExecution.platform.filter(scheduled_at__lte=until)
    return {str(i) for i in rows.values_list("id", flat=True)}


def run(args: list[str]) -> Result:
    support.setup()
    rounds = 10 if support.is_full(args) else 3
    result = Result(
        scenario=NAME,
        columns=[
            "stack",
            "kill",
            "takeover_s",
            "first_fire_after_kill_s",
            "max_record_gap_s",
            "late_after_kill_s",
            "expected",
            "recorded",
            "missed",
            "doubled_rows",
            "rows_without_doorbell",
            "extra_doorbells",
        ],
        targets={
            "failover": "takeover <= 1.0 s after SIGKILL (worst of 10 kills in bench-full),"
            " no fire due after the kill recorded late by more than that, zero missed,"
            " zero doubled"
        },
        notes=[
            f"{SCHEDULES} interval schedules of 1 s; two real beat processes; the leader is"
            f" SIGKILLed after {BEFORE_KILL:.0f} s; expected/recorded count every fire due"
            " from the kill window start to 3 s before the end;"
            " rows_without_doorbell = execution rows due by then that no broker message names"
            " (a run that would wait for the requeue grace); extra_doorbells = second"
            " messages for one row (the new leader re-rings its predecessor's last seconds;"
            " the worker's claim drops them)",
            stack_defaults.defaults_note(),
            "no worker consumes in this scenario: with fair dispatch on (the default) the"
            " leader holds the tenant's doorbells beyond FAIR_INFLIGHT_PER_TENANT back, so the"
            " doorbell columns are n/a on the default rows; --departures=no-fairness adds rows"
            " that count them (FAIR_INFLIGHT_PER_TENANT=0)",
            "takeover: the standby sees the killed leader's presence channel lose its"
            " subscriber (the kernel closed the dead process's sockets) and takes the lock"
            " over without waiting out its 1.5 s TTL (beat/lock.py)",
            "late_after_kill_s = the latest recording, among fires due in the 3 s after the"
            " kill, measured from the instant a healthy leader records them (due time less"
            " the 0.5 s ring-ahead); 0 = none late",
        ],
    )
    for combo in stack_defaults.departure_rows(args):
        for index in range(rounds):
            result.add(**_one_kill(index + 1, combo))
    result.notes.append(_stress_round())
    return result
