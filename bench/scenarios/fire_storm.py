"""fire-storm: N schedules due at the same instant; how fast each scheduler gets them out.

All three run as real `celery beat` processes on the same PostgreSQL and Redis, in the same
run, with every entry due at the same wall-clock instant T (a dozen seconds after start, so
loading is done). Counted: messages on the broker, sampled every 20 ms from T.
"""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime, timedelta

from bench import support
from bench.report import Result

NAME = "fire-storm"
QUICK = True
DESCRIPTION = (
    "10k (quick) / 10k+50k (full) schedules due at once: "
    "ours vs django-celery-beat vs celery-redbeat"
)
LEAD_SECONDS = 15.0


FIRE_BATCH = 2000


def _doorbells_in(message: bytes) -> int:
    envelope = json.loads(message)
    args = json.loads(base64.b64decode(envelope["body"]))[0]
    return len(args[0]) if isinstance(args[0], list) else 1


def _sample_doorbells(
    queue: str, *, expected: int, start_at: float, timeout: float
) -> tuple[int, float | None, float | None]:
    """Like `support.sample_queue`, but counting doorbells, not messages: each poll reads
    only the messages pushed since the last one."""
    client = support.redis()
    first = last = None
    seen_messages = doorbells = 0
    while True:
        length = client.llen(queue)
        now = time.time()
        if length > seen_messages:
            # Nothing consumes here, so counted from the tail the old ones stay put.
            fresh = client.lrange(queue, -length, -seen_messages - 1)
            doorbells += sum(_doorbells_in(message) for message in fresh)
            seen_messages = length
            first = first if first is not None else now - start_at
            last = now - start_at
        if doorbells >= expected or now - start_at > timeout:
            return doorbells, first, last
        time.sleep(0.02)


def _ours(
    count: int, timeout: float, *, per_message: int, ahead: float = 0.0, most: float = 0.0
) -> dict:
    """Up to `per_message` doorbells per broker message (SCHEDULER_DOORBELL_BATCH), the
    fires rung `ahead` seconds before they fall due (SCHEDULER_FIRE_AHEAD_SECONDS), a burst
    as early as it needs up to `most` (SCHEDULER_FIRE_AHEAD_MAX_SECONDS)."""
    from django.utils import timezone

    from scheduler_app.models import TaskDefinition

    support.reset()
    support.tasks_copy(
        count, row=lambda i: ("cron", "0 0 1 1 *", "UTC", None), created_at=timezone.now()
    )
    # The lead time starts once the rows are in (inserting must not eat into it).
    due = time.time() + LEAD_SECONDS
    TaskDefinition.platform.update(next_fire_at=datetime.fromtimestamp(due, UTC))
    beat = support.spawn(
        [
            "-m",
            "celery",
            "-A",
            "project",
            "beat",
            "-S",
            "beat:LeaderScheduler",
            "-l",
            "WARNING",
        ],
        log_name=f"fire-storm-ours-{count}",
        SCHEDULER_FIRE_BATCH=str(FIRE_BATCH),
        SCHEDULER_DOORBELL_BATCH=str(per_message),
        SCHEDULER_FIRE_AHEAD_SECONDS=str(ahead),
        SCHEDULER_FIRE_AHEAD_MAX_SECONDS=str(most),
        # Fair dispatch keeps at most FAIR_INFLIGHT_PER_TENANT doorbells of one tenant
        # waiting in a tier; with no worker taking them (as here) it would hold every fire
        # past the cap back as `pending`. Off: this measures the firing path like for like.
        FAIR_INFLIGHT_PER_TENANT="0",
    )
    try:
        sent, first, last = _sample_doorbells(
            "normal", expected=count, start_at=due, timeout=timeout
        )
    finally:
        support.stop(beat)
    from scheduler_app.models import TaskExecution

    recorded = TaskExecution.platform.count()
    label = f"ours (LeaderScheduler), up to {per_message} per message"
    if ahead:
        label += f", rung {ahead} s ahead"
    if most > ahead:
        label += f" (a burst up to {most} s)"
    return _row(label, count, sent, first, last, recorded=recorded)


def _dcb(count: int, timeout: float) -> dict:
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    support.reset()
    due = time.time() + LEAD_SECONDS
    every = IntervalSchedule.objects.create(every=3600, period=IntervalSchedule.SECONDS)
    last_run = datetime.fromtimestamp(due, UTC) - timedelta(seconds=3600)
    rows = [
        PeriodicTask(
            name=f"dcb{i}",
            task="bench.noop",
            interval=every,
            queue="anchor_dcb",
            last_run_at=last_run,
        )
        for i in range(count)
    ]
    PeriodicTask.objects.bulk_create(rows, batch_size=5000)
    from django_celery_beat.models import PeriodicTasks

    PeriodicTasks.update_changed()
    beat = support.spawn(
        [
            "-m",
            "celery",
            "-A",
            "project",
            "beat",
            "-S",
            "django_celery_beat.schedulers:DatabaseScheduler",
            "-l",
            "WARNING",
            "--max-interval",
            "1",
        ],
        log_name=f"fire-storm-dcb-{count}",
    )
    try:
        sent, first, last = support.sample_queue(
            ["anchor_dcb"], expected=count, start_at=due, timeout=timeout
        )
    finally:
        support.stop(beat)
    return _row("django-celery-beat DatabaseScheduler", count, sent, first, last)


def _redbeat(count: int, timeout: float, *, lock_timeout: int) -> dict:

    from bench.anchor_app import app

    support.reset()
    due = time.time() + LEAD_SECONDS + count / 2000  # the saves take about count/5000 s
    last_run = datetime.fromtimestamp(due, UTC) - timedelta(seconds=3600)
    _redbeat_entries_save(app, count, last_run=last_run)
    beat = support.spawn(
        [
            "-m",
            "celery",
            "-A",
            "bench.anchor_app",
            "beat",
            "-S",
            "redbeat.RedBeatScheduler",
            "-l",
            "WARNING",
            "--max-interval",
            "1",
        ],
        log_name=f"fire-storm-redbeat-{count}-lock{lock_timeout}",
        REDBEAT_LOCK_TIMEOUT=str(lock_timeout),
    )
    try:
        sent, first, last = support.sample_queue(
            ["anchor_rb"], expected=count, start_at=due, timeout=timeout, process=beat
        )
        crashed = beat.poll() is not None
    finally:
        support.stop(beat)
    label = f"celery-redbeat (lock {lock_timeout or 'default 5'} s)"
    row = _row(label, count, sent, first, last)
    if crashed:
        row["complete"] = (
            "no (beat crashed: "
            + _last_error(f"fire-storm-redbeat-{count}-lock{lock_timeout}")
            + ")"
        )
    return row


def _last_error(log_name: str) -> str:
    text = (support.ROOT / "bench" / "results" / "logs" / f"{log_name}.log").read_text(
        errors="replace"
    )
    for name in ("LockNotOwnedError", "Error", "Exception"):
        if name in text:
            return name
    return "exited"


def _redbeat_entries_save(app, count: int, *, last_run: datetime) -> None:
    """What `RedBeatSchedulerEntry.save()` writes for each entry (same keys, same JSON
    encoder), a thousand entries per pipeline so that loading 50k takes seconds."""
    import json

    from celery.schedules import schedule
    from redbeat import RedBeatSchedulerEntry
    from redbeat.decoder import RedBeatJSONEncoder

    client = support.redis()
    pipe = client.pipeline(transaction=False)
    for index in range(count):
        entry = RedBeatSchedulerEntry(
            f"rb{index}",
            "bench.noop",
            schedule(run_every=3600),
            options={"queue": "anchor_rb"},
            app=app,
            last_run_at=last_run,
        )
        definition = {
            "name": entry.name,
            "task": entry.task,
            "args": entry.args,
            "kwargs": entry.kwargs,
            "options": entry.options,
            "schedule": entry.schedule,
            "enabled": entry.enabled,
        }
        pipe.hset(entry.key, "definition", json.dumps(definition, cls=RedBeatJSONEncoder))
        pipe.hsetnx(
            entry.key, "meta", json.dumps({"last_run_at": last_run}, cls=RedBeatJSONEncoder)
        )
        pipe.zadd(app.redbeat_conf.schedule_key, {entry.key: entry.score})
        if index % 1000 == 999:
            pipe.execute()
    pipe.execute()


def _row(system: str, count: int, sent: int, first, last, recorded=None) -> dict:
    # From the due instant, or from the first publish when it came before it (rung ahead).
    span = last - min(first, 0.0) if first is not None and last is not None else 0.0
    rate = sent / span if span > 0 else 0.0
    return {
        "system": system,
        "schedules": count,
        "published": sent,
        "recorded": recorded if recorded is not None else "-",
        "first_publish_s": round(first, 3) if first is not None else "-",
        "last_publish_s": round(last, 3) if last is not None else "-",
        "fires_per_s": round(rate, 1),
        "complete": "yes" if sent >= count else "no (timed out)",
    }


def run(args: list[str]) -> Result:
    support.setup()
    full = support.is_full(args)
    sizes = [10_000, 50_000] if full else [10_000]
    chosen = [int(a.split("=", 1)[1]) for a in args if a.startswith("--size=")]
    sizes = chosen or sizes
    timeout = 120.0 if full else 60.0
    result = Result(
        scenario=NAME,
        columns=[
            "system",
            "schedules",
            "published",
            "recorded",
            "first_publish_s",
            "last_publish_s",
            "fires_per_s",
            "complete",
        ],
        targets={"fire-storm": ">= 5,000 fires/s and >= 50x django-celery-beat"},
    )
    from django.conf import settings

    defaults = settings.SCHEDULER
    per_message, ahead = defaults["DOORBELL_BATCH"], defaults["FIRE_AHEAD_SECONDS"]
    most = defaults["FIRE_AHEAD_MAX_SECONDS"]
    for count in sizes:
        ours = _ours(count, timeout, per_message=per_message)
        result.add(**ours)
        result.add(**_ours(count, timeout, per_message=1))
        if ahead:
            result.add(**_ours(count, timeout, per_message=per_message, ahead=ahead, most=most))
            # The fixed lead (SCHEDULER_FIRE_AHEAD_MAX_SECONDS=0).
            result.add(**_ours(count, timeout, per_message=per_message, ahead=ahead))
        dcb = _dcb(count, timeout)
        result.add(**dcb)
        result.add(**_redbeat(count, timeout, lock_timeout=600))
        if full:
            result.add(**_redbeat(count, timeout, lock_timeout=0))
        if dcb["fires_per_s"]:
            ratio = ours["fires_per_s"] / dcb["fires_per_s"]
            result.notes.append(f"{count:,} schedules: ours / django-celery-beat = {ratio:.0f}x")
    result.notes.append(
        "ours runs with fair dispatch off (FAIR_INFLIGHT_PER_TENANT=0): no worker consumes"
        " here, and fairness would hold one tenant's fires past its in-flight cap as pending"
    )
    result.notes.append(
        f"ours rings up to {per_message} fires of one tenant per broker message by default"
        " (SCHEDULER_DOORBELL_BATCH); the 1-per-message row is the like-for-like message count"
    )
    result.notes.append(
        f"by default ours rings fires {ahead} s before they fall due"
        f" (SCHEDULER_FIRE_AHEAD_SECONDS), a burst as early as its size and the leader's"
        f" measured ring rate need, up to {most} s (SCHEDULER_FIRE_AHEAD_MAX_SECONDS; a first"
        " burst is judged at an assumed 5,000 fires/s; the row without it is the fixed lead);"
        " the first two rows of each size ring"
        " at the due instant, like the others, and the ratio to django-celery-beat is taken"
        " from them; the 'a burst up to' row is the default configuration"
    )
    result.notes.append(
        "seconds are measured from the instant every entry was due (negative: before it);"
        " fires/s = published / (last_publish_s - min(first_publish_s, 0)); a scheduler that"
        " has not sent them all by the timeout is cut off there"
    )
    return result
