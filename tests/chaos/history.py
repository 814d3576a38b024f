"""The nemesis' history checker: reads what happened (the executions table, the handlers'
ledger, the nemesis log) and proves the scheduler's promises held, or lists where not.

Pure functions over plain records, so its own tests (tests/chaos/test_history.py) feed it
histories with each kind of violation. The properties, for tasks whose catch-up policy is
`all` (every missed instant inside the window is owed, so a hole is a loss, never a choice):

- instants_once: each scheduled instant of a task recorded once (one first attempt per
  (task, instant));
- instants_complete: every instant of the task's schedule from its first recorded one to
  its last recorded one is there (no fire lost to a fault);
- within_rules: every recorded instant is one of the schedule's (a fire "between" instants
  would be a clock bug), none before the task existed nor after it was paused (beyond the
  ring-ahead and the nemesis' clock step), none recorded later than the catch-up window
  after its instant, and no handler started before its run's instant (a run rung ahead of
  time, or by a leader whose clock runs ahead, waits for it in the worker);
- attempt_once: each run (an execution row: one attempt) executed by at most one pool
  process that lived through the chaos unharmed (never SIGSTOPped, not SIGKILLed, did not
  exit). A run may be executed again only when the process that ran it was lost: a worker
  lost re-queues its runs as the same attempt (`WORKER_LOST_REQUEUES`), re-claimed under a
  new claim token; its lost execution is accepted (counted as re_executed), a second one in
  a healthy process is a violation. With the claim recorded (the ledger's `claims`), each
  (run, claim) is also executed at most once outside a lost process. Two successful
  finishes of one run would need two executions in live processes, which this forbids; the
  row itself ends once (the finish is a conditional UPDATE on the claim token);
- all_ended: no run left pending, queued or running once the tasks were paused and the
  stack settled;
- success_executed: no run marked success whose handler never started.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from scheduler_app.choices import TERMINAL_STATUSES
from tests.ledger import LedgerEntry

PROPERTIES = (
    "instants_once",
    "instants_complete",
    "within_rules",
    "attempt_once",
    "all_ended",
    "success_executed",
)
# A handler may start this much before its instant by the clocks' resolution (the ledger's
# time.time() against the instant), no more.
START_TOLERANCE = timedelta(milliseconds=20)


@dataclass(frozen=True)
class RunRecord:
    id: str
    task_id: str
    scheduled_at: datetime
    attempt: int
    status: str
    created_at: datetime


@dataclass(frozen=True)
class TaskRecord:
    id: str
    created_at: datetime
    paused_at: datetime | None
    # The instant after a given one (the task's schedule: Schedule.next_after).
    next_after: Callable[[datetime], datetime | None]


@dataclass(frozen=True)
class Rules:
    catchup_window: timedelta = timedelta(seconds=300)
    ring_ahead: timedelta = timedelta(seconds=8)
    # The largest step the nemesis gave a beat's clock: a leader that far ahead records
    # (and rings) that much early, and dates its rows by its own clock.
    clock_step: timedelta = timedelta(0)


@dataclass
class Verdict:
    instants: int = 0
    runs: int = 0
    executions: int = 0
    re_executed: int = 0
    violations: dict[str, list[str]] = field(
        default_factory=lambda: {name: [] for name in PROPERTIES}
    )

    def fail(self, prop: str, message: str) -> None:
        self.violations[prop].append(message)

    @property
    def clean(self) -> bool:
        return not any(self.violations.values())

    def rows(self) -> list[tuple[str, int, str]]:
        """(property, violations, the first one) for the table."""
        return [
            (name, len(found), found[0] if found else "") for name, found in self.violations.items()
        ]

    def summary(self) -> str:
        lines = [
            f"{self.instants} instants, {self.runs} runs, {self.executions} executions "
            f"({self.re_executed} accepted re-executions after a lost process)"
        ]
        for name, count, first in self.rows():
            lines.append(f"  {name}: {'ok' if not count else f'{count} violation(s): {first}'}")
        return "\n".join(lines)


def check(
    *,
    runs: Iterable[RunRecord],
    tasks: Iterable[TaskRecord],
    ledger: Iterable[LedgerEntry],
    survivors: set[int],
    rules: Rules,
) -> Verdict:
    """`survivors`: the pool processes that lived through the chaos unharmed (see
    attempt_once); an execution in any other process was lost with it."""
    runs, ledger = list(runs), list(ledger)
    tasks_by_id = {task.id: task for task in tasks}
    verdict = Verdict(runs=len(runs), executions=len(ledger))
    by_run = collections.defaultdict(list)
    for entry in ledger:
        by_run[entry.execution_id].append(entry)
    _instants(runs, tasks_by_id, rules, verdict)
    _starts(runs, by_run, verdict)
    _attempts(runs, by_run, survivors, verdict)
    for run in runs:
        if run.status not in TERMINAL_STATUSES:
            verdict.fail("all_ended", f"run {run.id} ({run.scheduled_at}) left {run.status}")
        if run.status == "success" and run.id not in by_run:
            verdict.fail("success_executed", f"run {run.id} success, never executed")
    return verdict


def _instants(runs, tasks_by_id, rules: Rules, verdict: Verdict) -> None:
    firsts = collections.defaultdict(list)
    for run in runs:
        if run.attempt == 1:
            firsts[run.task_id].append(run)
    for task_id, recorded in firsts.items():
        task = tasks_by_id[task_id]
        counts = collections.Counter(run.scheduled_at for run in recorded)
        verdict.instants += len(counts)
        for instant, count in counts.items():
            if count > 1:
                verdict.fail("instants_once", f"task {task_id} {instant} recorded {count} times")
        for run in recorded:
            _within_rules(run, task, rules, verdict)
        instant, last = min(counts), max(counts)
        while instant is not None and instant <= last:
            if instant not in counts:
                verdict.fail("instants_complete", f"task {task_id} {instant} never recorded")
            instant = task.next_after(instant)


def _within_rules(run: RunRecord, task: TaskRecord, rules: Rules, verdict: Verdict) -> None:
    instant = run.scheduled_at
    slack = rules.ring_ahead + rules.clock_step
    if task.next_after(instant - timedelta(microseconds=1)) != instant:
        verdict.fail("within_rules", f"run {run.id}: {instant} is not an instant of its schedule")
    if instant < task.created_at:
        verdict.fail("within_rules", f"run {run.id}: {instant} before its task existed")
    if task.paused_at is not None and instant > task.paused_at + slack:
        verdict.fail("within_rules", f"run {run.id}: {instant} after its task was paused")
    if run.created_at - instant > rules.catchup_window + rules.clock_step:
        verdict.fail(
            "within_rules", f"run {run.id}: recorded {run.created_at}, past the catch-up window"
        )


def _starts(runs, by_run, verdict: Verdict) -> None:
    for run in runs:
        for entry in by_run.get(run.id, ()):
            if entry.started < (run.scheduled_at - START_TOLERANCE).timestamp():
                early = run.scheduled_at.timestamp() - entry.started
                verdict.fail("within_rules", f"run {run.id}: handler started {early:.3f}s early")


def _attempts(runs, by_run, survivors: set[int], verdict: Verdict) -> None:
    known = {run.id for run in runs}
    for run_id, entries in by_run.items():
        if run_id not in known:
            continue  # another test's run in the same ledger file: not this history
        healthy = [entry for entry in entries if entry.pid in survivors]
        if len(healthy) > 1:
            verdict.fail(
                "attempt_once",
                f"run {run_id} executed {len(healthy)} times by live processes "
                f"{sorted(entry.pid for entry in healthy)}",
            )
        claims = collections.Counter(entry.claim for entry in healthy if entry.claim)
        for claim, count in claims.items():
            if count > 1:
                verdict.fail("attempt_once", f"run {run_id} claim {claim} executed {count} times")
        verdict.re_executed += max(0, len(entries) - 1) if len(healthy) <= 1 else 0
