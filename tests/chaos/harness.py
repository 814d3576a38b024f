"""The chaos suite's stack and scorecard.

A stack is a private redis-server, beats and workers (real processes) against the test
database, and one-second ledger tasks (tests/ledger.py: each attempt writes its execution id
to a file as it starts). A case injects one fault, heals it, and `settle` scores the run:

- doubled: fires recorded twice (two first attempts of one task at one time) plus claims
  whose handler ran twice (the ledger: a run re-queued after a lost worker may start once
  more per requeue);
- unended: runs still pending, queued or running a minute after the tasks were paused (or
  after the last of them fell due, for retries the retry budget deferred to a later minute),
  the beats and workers still up (a run recorded and never ended);
- resumed: seconds from the heal to the first handler start (the ledger's clock), at or
  after the heal, of a run due after the heal (`resumed_seconds`).

Workers run supervised (tests/supervisor.py says why): one that exits is started again, and
`restarts` counts it.
"""

from __future__ import annotations

import collections
import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from django.utils import timezone

import tests.ledger  # noqa: F401 (registers the `ledger` handler in this process)
from scheduler_app.choices import TERMINAL_STATUSES
from scheduler_app.models import ExecutionLoss, TaskExecution, Tenant
from scheduler_app.services.task_definitions import task_pause
from tests.factories import make_task
from tests.ledger import ledger_counts, ledger_env, ledger_starts
from tests.processes import ServiceProcess, start_beat, stop_all, wait_until
from tests.redis_servers import RedisServer, new_server, queue_server_args
from tests.supervisor import WorkerSupervisor

LONG = os.environ.get("CHAOS_LONG") == "1"

CHAOS_BEAT = {
    "SCHEDULER_LOCK_TTL": "1.5",
    "SCHEDULER_LOCK_TRY_SECONDS": "0.25",
    "SCHEDULER_TICK_SECONDS": "0.2",
    "SCHEDULER_HOUSEKEEPING_SECONDS": "0.5",
    # Doorbells lost with Redis (or with a worker's unacknowledged messages) are rung again
    # after this; production waits 300 s.
    "SCHEDULER_REQUEUE_GRACE": "5",
    "WORKER_HEARTBEAT_SECONDS": "0.5",
}
CHAOS_WORKER = {
    "WORKER_KILL_GRACE_SECONDS": "1",
    "WORKER_LEASE_SECONDS": "10",
    "WORKER_HEARTBEAT_SECONDS": "0.5",
    "WORKER_CANCEL_POLL_SECONDS": "0.2",
}
RESUME_LIMIT_SECONDS = 20.0
# How long settling waits, at most, for runs deferred to a later minute to fall due and end.
DEFERRED_WAIT_LIMIT_SECONDS = 300.0


def scaled(short: float, long: float) -> float:
    return long if LONG else short


@dataclass
class CaseResult:
    case: str
    fault: str
    fault_seconds: float
    fires: int
    attempts_run: int
    restarts: int
    doubled: int
    unended: int
    resumed_seconds: float | None
    # The machine's 1-minute load average when the case ended (the machine is shared).
    load: float = field(default_factory=lambda: round(os.getloadavg()[0], 2))

    def assert_clean(self, *, resume_limit: float = RESUME_LIMIT_SECONDS) -> None:
        assert self.doubled == 0, f"{self.case}: {self.doubled} doubled"
        assert self.unended == 0, f"{self.case}: {self.unended} runs never ended"
        assert self.resumed_seconds is not None, f"{self.case}: fires never resumed"
        assert self.resumed_seconds <= resume_limit, f"{self.case}: {self.resumed_seconds}s"


@dataclass
class ChaosStack:
    # None when the stack runs on a database of its own (tests/chaos/embedded.py).
    tenant: Tenant | None
    redis: RedisServer
    ledger: Path
    tasks: list
    env: dict[str, str]
    beats: dict[str, ServiceProcess] = field(default_factory=dict)
    fault_at: datetime | None = None
    healed_at: datetime | None = None
    supervisor: WorkerSupervisor = field(default_factory=WorkerSupervisor)
    _started: float = field(default_factory=time.monotonic)
    _logged_before_fault: dict[str, int] = field(default_factory=dict)

    def mark(self, phase: str) -> None:
        """A timeline on stdout (pytest shows it when a case fails)."""
        print(f"[chaos +{time.monotonic() - self._started:6.1f}s] {phase}", flush=True)

    # --- processes ---------------------------------------------------------------------
    def start_beat(self, node: str, **env: str) -> ServiceProcess:
        beat = start_beat(node_id=node, env_overrides={**CHAOS_BEAT, **self.env, **env})
        self.beats[node] = beat
        return beat

    @property
    def workers(self) -> dict[str, ServiceProcess]:
        return self.supervisor.workers

    def start_worker(
        self, name: str, *, concurrency: int = 2, wait: bool = True, **env: str
    ) -> ServiceProcess:
        """`wait`: until it is ready; else `wait_for_workers` waits for all started, so that
        workers (and the beats started before them) boot side by side."""
        return self.supervisor.start(
            name,
            wait=wait,
            concurrency=concurrency,
            env_overrides={**CHAOS_WORKER, **self.env, **env},
        )

    def wait_for_workers(self) -> None:
        for worker in self.workers.values():
            worker.wait_for_log("ready.", timeout=60)

    def kill_worker(self, name: str) -> None:
        """SIGKILL a worker for good (its node is gone): the supervisor leaves it dead."""
        self.supervisor.kill(name)

    def processes(self) -> list[ServiceProcess]:
        return [*self.beats.values(), *self.workers.values()]

    def logs(self) -> str:
        return "\n".join(f"----- {p.name}\n{p.log()[-3000:]}" for p in self.processes())

    # --- observations ------------------------------------------------------------------
    def executions(self):
        return TaskExecution.platform.filter(task__in=self.tasks)

    def succeeded_after(self, moment: datetime) -> int:
        return self.executions().filter(status="success", scheduled_at__gt=moment).count()

    # What `settle` reads and writes, so that a stack on another database (the embedded
    # PostgreSQL case) is scored by the same code.
    def pause_tasks(self) -> None:
        for task in self.tasks:
            task_pause(task=task)

    def open_runs(self) -> bool:
        return self.executions().exclude(status__in=TERMINAL_STATUSES).exists()

    def execution_rows(self) -> list:
        """The stack's runs: objects with id, task_id, scheduled_at, attempt, status and
        started_at."""
        return list(self.executions())

    def claims_of(self, executions: list) -> dict[str, int]:
        """How many claims each run may have had: one, plus one per requeue after a lost
        worker (`ExecutionLoss`)."""
        requeued = ExecutionLoss.platform.filter(
            execution_id__in=[e.id for e in executions], outcome="requeued"
        ).values_list("execution_id", flat=True)
        claims: dict[str, int] = {}
        for execution_id in requeued:
            claims[str(execution_id)] = claims.get(str(execution_id), 1) + 1
        return claims

    def wait_for_runs(self, count: int, *, timeout: float = 60) -> None:
        self.mark(f"waiting for {count} runs")
        since = timezone.now()
        wait_until(
            lambda: self.succeeded_after(since) >= count,
            timeout=timeout,
            interval=0.2,
            message=f"{count} runs",
        )

    def fault(self) -> None:
        self.mark("fault")
        self.fault_at = timezone.now()
        self._logged_before_fault = {p.name: len(p.log()) for p in self.processes()}

    def wait_until_logged(
        self, process: ServiceProcess, *needles: str, times: int = 1, timeout: float = 30
    ) -> None:
        """Until `process` has logged `needles` (any of them) `times` times since the fault:
        the fault was felt (a case holds its fault that long, not for a fixed time a loaded
        machine may not even notice it in)."""
        start = self._logged_before_fault.get(process.name, 0)

        def felt() -> bool:
            since = process.log()[start:]
            return sum(since.count(needle) for needle in needles) >= times

        wait_until(
            felt,
            timeout=timeout,
            interval=0.1,
            message=f"{process.name} to log {needles} {times} time(s) after the fault",
        )
        self.mark(f"{process.name} felt the fault")

    def hold_fault(self, long_seconds: float) -> None:
        """The long versions (`make chaos`) hold each fault this much longer, the load they
        carry meanwhile being what they measure; the short ones go on once it is felt."""
        if LONG:
            time.sleep(long_seconds)

    def heal(self) -> None:
        self.mark("heal")
        self.healed_at = timezone.now()

    def wait_for_resume(self, *, timeout: float = RESUME_LIMIT_SECONDS + 10) -> None:
        assert self.healed_at is not None
        wait_until(
            lambda: self.succeeded_after(self.healed_at) >= 3,
            timeout=timeout,
            interval=0.2,
            message="fires to resume after the heal",
        )

    def _wait_for_open_runs(self, timeout: float) -> None:
        """Up to `timeout` for every recorded run to end; and as long again after the last
        open run falls due, when runs are open because they are not due yet: retries over the
        fleet's retry budget wait for a later minute on purpose (services/retry_budget.py;
        after an outage fails every run in flight at once), which is no run left unended."""
        give_up = time.monotonic() + DEFERRED_WAIT_LIMIT_SECONDS
        wait = timeout
        while True:
            with contextlib.suppress(AssertionError):
                wait_until(
                    lambda: not self.open_runs(),
                    timeout=wait,
                    interval=0.5,
                    message="every recorded run to end",
                )
                return
            now = timezone.now()
            due = [
                e.scheduled_at
                for e in self.execution_rows()
                if e.status not in TERMINAL_STATUSES and e.scheduled_at > now
            ]
            if not due or time.monotonic() >= give_up:
                return
            self.mark(f"{len(due)} open runs not due yet (deferred retries), until {max(due)}")
            wait = min((max(due) - now).total_seconds(), give_up - time.monotonic()) + timeout

    def settle(self, *, case: str, fault: str, timeout: float = 60) -> CaseResult:
        """Stop firing (the tasks are paused; the beats keep reaping expired leases and
        ringing forgotten runs again, as in production), let every recorded run end, stop
        everything, and score."""
        self.mark("settling: tasks paused")
        self.pause_tasks()
        self._wait_for_open_runs(timeout)
        self.mark("stopping")
        stop_all(self.beats.values())
        self.supervisor.stop_watching()
        stop_all(self.workers.values())
        self.mark("stopped")
        executions = self.execution_rows()
        first_attempts = collections.Counter(
            (e.task_id, e.scheduled_at) for e in executions if e.attempt == 1
        )
        ran = ledger_counts(self.ledger)
        doubled = sum(n - 1 for n in first_attempts.values() if n > 1)
        # A run re-queued after its worker was lost starts once more under its new claim: once
        # per claim is the promise (1 + its requeues), not once per row.
        claims = self.claims_of(executions)
        doubled += sum(max(0, n - claims.get(run, 1)) for run, n in ran.items())
        # A run that succeeded without its handler having started would be a lie.
        doubled += len({str(e.id) for e in executions if e.status == "success"} - set(ran))
        open_runs = [e for e in executions if e.status not in TERMINAL_STATUSES]
        unended = len(open_runs)
        if open_runs:  # on the timeline: which runs, in what state (shown if the case fails)
            by_status = collections.Counter(e.status for e in open_runs)
            self.mark(
                f"{unended} open runs {dict(by_status)}, due "
                f"{min(e.scheduled_at for e in open_runs).isoformat()} to "
                f"{max(e.scheduled_at for e in open_runs).isoformat()}; "
                f"never started: {sum(1 for e in open_runs if str(e.id) not in ran)}"
            )
        resumed = resumed_seconds(executions, ledger_starts(self.ledger), self.healed_at)
        fault_seconds = 0.0
        if self.fault_at is not None and self.healed_at is not None:
            fault_seconds = round((self.healed_at - self.fault_at).total_seconds(), 2)
        return CaseResult(
            case=case,
            fault=fault,
            fault_seconds=fault_seconds,
            fires=len(first_attempts),
            attempts_run=sum(ran.values()),
            restarts=self.supervisor.restarts,
            doubled=doubled,
            unended=unended,
            resumed_seconds=resumed,
        )


def resumed_seconds(
    executions: list, handler_starts: dict[str, float], healed_at: datetime | None
) -> float | None:
    """Seconds from `healed_at` to the first handler start, at or after it, of a run scheduled
    after it; None when no such run started (or nothing was healed).

    Not the row's started_at: a run rung ahead of its time (SCHEDULER_FIRE_AHEAD_SECONDS) is
    claimed, and its started_at stamped, up to that much before it falls due, so a run due
    just after the heal could look "started" before it (-0.03 s once, when a worker was
    SIGKILLed and the kill instant was recorded just after the survivor's claim). The ledger
    dates the handler itself, which waits for the run's time (workers.due); a start before
    the heal (a batch's later run started with its earlier ones) is not a resumption, so the
    figure is never negative by construction."""
    if healed_at is None:
        return None
    heal = healed_at.timestamp()
    starts = [
        handler_starts[str(e.id)]
        for e in executions
        if e.scheduled_at > healed_at and str(e.id) in handler_starts
    ]
    after = [start for start in starts if start >= heal]
    return round(min(after) - heal, 2) if after else None


@contextlib.contextmanager
def this_process_publishes_to(url: str) -> Iterator[None]:
    """Doorbells this test process rings (an API trigger) go to `url`'s Redis meanwhile."""
    from project.celery import app

    previous = app.conf.broker_url

    def use(broker_url: str) -> None:
        # Drop (not close) the cached pools, as tests.processes.broker_key_prefix does.
        app._pool = None
        app.amqp._producer_pool = None
        app.conf.broker_url = broker_url

    use(url)
    try:
        yield
    finally:
        use(previous)


def ledger_task_spec(index: int, ledger: Path, handler_seconds: float) -> dict:
    """A one-second ledger task (the spec `make_task` takes)."""
    return {
        "name": f"chaos-{index}",
        "schedule": {"type": "cron", "expression": "* * * * * *"},
        "handler": {"type": "python", "callable": "ledger"},
        "parameters": {"path": str(ledger), "seconds": handler_seconds},
        "retry_policy": {"max_attempts": 5, "backoff": "fixed", "base_delay_seconds": 0},
        "timeout_seconds": 60,
    }


def stack_env(redis: RedisServer) -> dict[str, str]:
    """What the stack's beats and workers get on top of tests.processes.service_env."""
    return {
        "REDIS_URL": redis.url,
        "CELERY_BROKER_URL": redis.url,
        "CELERY_RESULT_BACKEND": redis.url,
        "BROKER_KEY_PREFIX": "",
        **ledger_env(),
    }


@contextlib.contextmanager
def chaos_stack(
    tenant: Tenant,
    tmp_path: Path,
    settings,
    *,
    tasks: int = 1,
    handler_seconds: float = 0.0,
    redis_args: tuple[str, ...] = (),
) -> Iterator[ChaosStack]:
    """A private Redis and `tasks` one-second ledger tasks; the case starts the processes.
    This process's own Redis clients (registry, lock and status views) use the private Redis
    too, through the `settings` fixture."""
    redis = new_server(*queue_server_args(*redis_args)).start()
    settings.REDIS_URL = redis.url
    ledger = tmp_path / "ledger.txt"
    created = [
        make_task(tenant, **ledger_task_spec(index, ledger, handler_seconds))
        for index in range(tasks)
    ]
    env = stack_env(redis)
    stack = ChaosStack(tenant=tenant, redis=redis, ledger=ledger, tasks=created, env=env)
    try:
        yield stack
    except BaseException:
        print(stack.logs())
        print(redis.log())
        raise
    finally:
        stack.supervisor.stop_watching()
        stop_all(stack.processes(), timeout=10)
        redis.stop()
