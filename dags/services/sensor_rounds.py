"""One round of sensor pokes: take the due sensors, poke them, record what each answered.

Where pokes run. In the beat leader's process, on a thread of their own started by the
housekeeping chore (`dags.housekeeping`), never on the firing loop and never on a worker: a
sensor holds no execution row and no worker slot while it waits, and a poke is a short
request with a timeout, not tenant code. A Celery task on a queue of its own would need a
pool the deployments do not run; the leader already owns the rows and their lease.

Budgets (CONVENTIONS "Budgets"). Each poke has a timeout (DAG_SENSORS POKE_TIMEOUT_SECONDS,
on connect, reads and the whole exchange). A round takes at most TENANT_POKES due sensors of
one tenant, and a tenant's pokes run one after the other on one thread while the tenants run
side by side (THREADS): one tenant's slow or hanging targets spend that tenant's
TENANT_SECONDS and its thread, never another tenant's. What a tenant's budget did not reach is
released to the next round, and so is a tenant whose turn comes too late for the round to end
inside the lease its rows were taken with (a minute). The claim orders by due time, within
each tenant and overall, and a released row keeps its due time: it comes first next round.

Backoff. After a poke that does not find its condition, the next one waits the sensor's
current interval, which then doubles up to its `max_interval` (default 10 minutes). An
unreachable target is "not yet" (the error is recorded on the row, the run page shows it);
a private one, a missing secret or a query over the JSONPath budget is refused for good: the
node fails at once, nothing is polled again. Past the deadline the node ends `timed_out`
(`on_timeout: fail`, the DAG's failure policy applies) or `skipped` (`on_timeout: skip`).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connections
from django.utils import timezone

from dags.choices import NodeStatus, RunStatus, TimerKind, TimerStatus
from dags.models import DagRun, DagTimer
from dags.sensors.base import Poke
from dags.sensors.http import http_poke
from dags.sensors.s3 import s3_poke
from dags.sensors.sql import sql_poke
from dags.services.timers import LEASE_SECONDS, timer_end, timer_release, timers_claim
from dags.spec_timers import BACKOFF_FACTOR
from dags.versions import graph_of_version
from scheduler_app.limits import expression_budget
from scheduler_app.models import Tenant
from scheduler_app.services.secrets import referenced_names, secrets_resolve, substitute

logger = logging.getLogger(__name__)

ROUND_SLACK = 5.0  # seconds kept between the round's last poke and the end of its lease


@dataclass
class SensorRound:
    fired: int = 0
    waiting: int = 0  # poked, not yet
    timed_out: int = 0
    refused: int = 0
    released: int = 0  # over a tenant's budget: left to the next round
    errors: dict[str, str] = field(default_factory=dict)  # node id -> error (this round)


@dataclass
class _Job:
    timer: DagTimer
    spec: dict[str, Any]  # the node's spec: sensor config and poke settings
    config: dict[str, Any] | None = None  # secrets filled in
    secrets: tuple[str, ...] = ()
    poke: Poke | None = None


def sensors_poke(*, now: datetime | None = None) -> SensorRound:
    """One round at `now` (the housekeeping's clock; tests inject it): what is due, what is
    past its deadline, and when each sensor pokes next are all reckoned from it."""
    config = settings.DAG_SENSORS
    now = now or timezone.now()
    claimed = timers_claim(
        kind=TimerKind.SENSOR, now=now, limit=config["BATCH"], per_tenant=config["TENANT_POKES"]
    )
    outcome = SensorRound()
    if not claimed.timers:
        return outcome
    jobs, running = _jobs(claimed.timers)
    due = []
    for job in jobs:
        if job.timer.run_id not in running:
            # Its run ended another way (a cancel, fail_all): the row ends cancelled, unpoked.
            _cancel(job, lease=claimed.lease, now=now)
        elif job.timer.deadline is not None and job.timer.deadline <= now:
            outcome.timed_out += _timeout(job, lease=claimed.lease, now=now)
        else:
            due.append(job)
    _configs_fill(due)
    by_tenant: dict[Any, list[_Job]] = defaultdict(list)
    for job in due:
        if job.config is not None:
            by_tenant[job.timer.tenant_id].append(job)
    hosts = dict(
        Tenant.objects.filter(id__in=list(by_tenant)).values_list("id", "webhook_allowed_hosts")
    )
    # The whole round ends inside the lease its rows were taken with: a tenant whose turn
    # comes too late is released (its rows keep their due time, so they come first next round).
    round_ends = time.monotonic() + LEASE_SECONDS - config["POKE_TIMEOUT_SECONDS"] - ROUND_SLACK
    if by_tenant:
        with ThreadPoolExecutor(max_workers=min(config["THREADS"], len(by_tenant))) as pool:
            list(
                pool.map(
                    lambda item: _tenant_pokes(
                        item[1], hosts.get(item[0]) or [], round_ends=round_ends
                    ),
                    by_tenant.items(),
                )
            )
    for job in due:
        _record(job, lease=claimed.lease, now=now, outcome=outcome)
    return outcome


def _jobs(timers: list[DagTimer]) -> tuple[list[_Job], set[Any]]:
    """The claimed rows with their node's spec, and which of their runs still run."""
    runs = DagRun.platform.filter(id__in={t.run_id for t in timers})
    versions, running = {}, set()
    for run_id, version_id, status in runs.values_list("id", "version_id", "status"):
        versions[run_id] = version_id
        if status == RunStatus.RUNNING:
            running.add(run_id)
    jobs = [
        _Job(timer=timer, spec=graph_of_version(versions[timer.run_id]).nodes[timer.node_id])
        for timer in timers
        if timer.run_id in versions
    ]
    return jobs, running


def _cancel(job: _Job, *, lease: datetime, now: datetime) -> None:
    DagTimer.platform.filter(id=job.timer.id, status=TimerStatus.WAITING, lease_until=lease).update(
        status=TimerStatus.CANCELLED, resolved_at=now, lease_until=None
    )


def _configs_fill(jobs: list[_Job]) -> None:
    """Each sensor's config with its `{{secret:name}}` filled in (the tenant's own secrets);
    a secret that is missing or cannot be decrypted refuses the poke."""
    for job in jobs:
        sensor = job.spec["sensor"]
        names = referenced_names(sensor)
        try:
            values = secrets_resolve(tenant_id=job.timer.tenant_id, names=names)
        except KeyError as missing:
            job.poke = Poke(done=False, error=f"no secret named {missing.args[0]}", refused=True)
            continue
        except ValueError as error:
            job.poke = Poke(done=False, error=str(error), refused=True)
            continue
        job.config = substitute(sensor, values)
        job.secrets = tuple(value for value in values.values() if value)


def _tenant_pokes(jobs: list[_Job], allowed_hosts: list[str], *, round_ends: float) -> None:
    """One tenant's pokes, in turn, within its budget of time and the round's (no database
    here: the thread only talks to the targets)."""
    config = settings.DAG_SENSORS
    spent_by = min(time.monotonic() + config["TENANT_SECONDS"], round_ends)
    for job in jobs:
        if time.monotonic() >= spent_by:
            return  # job.poke stays None: released
        try:
            job.poke = poke_once(
                job.config or {},
                allowed_hosts=allowed_hosts,
                timeout_seconds=min(
                    config["POKE_TIMEOUT_SECONDS"], max(1.0, spent_by - time.monotonic())
                ),
                secrets=job.secrets,
            )
        except Exception as error:  # a poker's bug is this sensor's error, not the round's
            logger.exception("sensor poke failed")
            job.poke = Poke(done=False, error=f"{type(error).__name__}: {error}")


def poke_once(
    config: dict[str, Any],
    *,
    allowed_hosts: list[str],
    timeout_seconds: float,
    secrets: tuple[str, ...] = (),
) -> Poke:
    """Ask the sensor's question once (its config with secrets filled in)."""
    kind = config["kind"]
    if kind == "http":
        return http_poke(
            config,
            allowed_hosts=allowed_hosts,
            timeout_seconds=timeout_seconds,
            budget=expression_budget(),
            secrets_to_mask=secrets,
        )
    if kind == "s3":
        return s3_poke(config, allowed_hosts=allowed_hosts, timeout_seconds=timeout_seconds)
    return sql_poke(
        config,
        allowed_hosts=allowed_hosts,
        timeout_seconds=timeout_seconds,
        platform_databases=_platform_databases(),
    )


def _platform_databases() -> list[tuple[str, int, str]]:
    return [
        (
            str(c.settings_dict.get("HOST") or "localhost"),
            int(c.settings_dict.get("PORT") or 5432),
            str(c.settings_dict.get("NAME") or ""),
        )
        for c in connections.all()
    ]


def _masked(text: str, secrets: tuple[str, ...]) -> str:
    for value in secrets:
        text = text.replace(value, "***")
    return text


def _record(job: _Job, *, lease: datetime, now: datetime, outcome: SensorRound) -> None:
    timer, poke = job.timer, job.poke
    if poke is None:
        timer_release(timer=timer, lease=lease)
        outcome.released += 1
        return
    error = _masked(poke.error, job.secrets)
    poked = {"attempts": timer.attempts + 1, "last_poked_at": now}
    if error:
        outcome.errors[timer.node_id] = error
    if poke.done:
        outcome.fired += timer_end(
            timer=timer,
            lease=lease,
            now=now,
            timer_status=TimerStatus.FIRED,
            node_status=NodeStatus.SUCCESS,
            result=poke.result,
            changes={**poked, "last_result": poke.result},
        )
        return
    if poke.refused:
        outcome.refused += timer_end(
            timer=timer,
            lease=lease,
            now=now,
            timer_status=TimerStatus.FAILED,
            node_status=NodeStatus.FAILED,
            error=f"sensor {job.spec['sensor']['kind']}: {error}",
            changes=poked,
        )
        return
    wait = timer.interval_seconds
    due_at = now + timedelta(seconds=wait)
    if timer.deadline is not None:
        due_at = min(due_at, timer.deadline)
    DagTimer.platform.filter(id=timer.id, status=TimerStatus.WAITING, lease_until=lease).update(
        due_at=due_at,
        interval_seconds=min(wait * BACKOFF_FACTOR, job.spec["max_interval"]),
        last_error=error[:4000],
        lease_until=None,
        **poked,
    )
    outcome.waiting += 1


def _timeout(job: _Job, *, lease: datetime, now: datetime) -> int:
    timer = job.timer
    skip = job.spec["on_timeout"] == "skip"
    last = f"; last poke: {timer.last_error}" if timer.last_error else ""
    message = (
        f"sensor {job.spec['sensor']['kind']}: condition not met within "
        f"{job.spec['timeout']:g} s ({timer.attempts} pokes){last}"
    )
    return timer_end(
        timer=timer,
        lease=lease,
        now=now,
        timer_status=TimerStatus.TIMED_OUT,
        node_status=NodeStatus.SKIPPED if skip else NodeStatus.TIMED_OUT,
        error=message,
        changes={"last_error": timer.last_error},
    )
