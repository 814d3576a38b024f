"""The nemesis' history checker (tests/chaos/history.py) on histories made up to hold one
violation each: a checker that passes everything proves nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.chaos.history import Rules, RunRecord, TaskRecord, check
from tests.ledger import LedgerEntry

T0 = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)


def _every_second(moment: datetime) -> datetime:
    return moment.replace(microsecond=0) + SECOND


TASK = TaskRecord("t", created_at=T0 - SECOND, paused_at=T0 + 10 * SECOND, next_after=_every_second)


def _run(n: int, *, attempt: int = 1, status: str = "success", run_id: str | None = None):
    at = T0 + n * SECOND
    return RunRecord(run_id or f"r{n}-{attempt}", "t", at, attempt, status, created_at=at)


def _ran(run: RunRecord, pid: int = 100, *, claim: str | None = None, late: float = 0.01):
    return LedgerEntry(run.id, run.attempt, pid, claim, run.scheduled_at.timestamp() + late)


def _history(count: int = 5):
    runs = [_run(n) for n in range(count)]
    return runs, [_ran(run) for run in runs]


def _check(runs, ledger, survivors=frozenset({100, 101})):
    return check(runs=runs, tasks=[TASK], ledger=ledger, survivors=set(survivors), rules=Rules())


def _failed(verdict) -> dict[str, int]:
    return {name: count for name, count, _ in verdict.rows() if count}


def test_a_clean_history_is_clean():
    runs, ledger = _history()
    verdict = _check(runs, ledger)
    assert verdict.clean, verdict.summary()
    assert (verdict.instants, verdict.runs, verdict.executions) == (5, 5, 5)


def test_an_instant_recorded_twice():
    runs, ledger = _history()
    twin = _run(2, run_id="twin")
    assert _failed(_check([*runs, twin], [*ledger, _ran(twin)])) == {"instants_once": 1}


def test_an_instant_never_recorded():
    runs, ledger = _history()
    del runs[2], ledger[2]
    assert _failed(_check(runs, ledger)) == {"instants_complete": 1}


def test_a_fire_between_instants_after_the_pause_or_started_early():
    runs, ledger = _history()
    between = RunRecord("between", "t", T0 + 1.5 * SECOND, 1, "success", T0 + 1.5 * SECOND)
    after_pause = _run(30)
    early = _run(5)
    verdict = _check(
        [*runs, between, after_pause, early],
        [*ledger, _ran(between), _ran(after_pause), _ran(early, late=-0.5)],
    )
    found = verdict.violations["within_rules"]
    assert len(found) == 3, found
    # 30 is past the last instant before it: the holes up to it are not this test's point.
    assert {"within_rules", "instants_complete"} == set(_failed(verdict))


def test_a_run_executed_twice_by_live_processes():
    runs, ledger = _history()
    assert _failed(_check(runs, [*ledger, _ran(runs[1], pid=101)])) == {"attempt_once": 1}


def test_a_run_executed_again_after_its_process_was_lost_is_accepted_once():
    # Its first execution was in a pool process the nemesis killed (not a survivor); the
    # same attempt re-claimed ran again in a live one: accepted, counted.
    runs, ledger = _history()
    again = [*ledger, _ran(runs[1], pid=555, claim="old"), _ran(runs[2], pid=555)]
    verdict = _check(runs, again)
    assert verdict.clean, verdict.summary()
    assert verdict.re_executed == 2


def test_one_claim_executed_twice_is_a_violation_even_across_live_processes():
    runs, ledger = _history()
    ledger[3] = _ran(runs[3], claim="c1")
    twice = [*ledger, _ran(runs[3], pid=101, claim="c1")]
    assert len(_check(runs, twice).violations["attempt_once"]) == 2  # twice live, one claim


def test_a_run_left_open_and_a_success_never_executed():
    runs, ledger = _history()
    runs[4] = _run(4, status="queued")
    del ledger[1]
    assert _failed(_check(runs, ledger)) == {"all_ended": 1, "success_executed": 1}


def test_a_late_recording_past_the_window_is_outside_the_rules():
    runs, ledger = _history()
    late = RunRecord("late", "t", T0 + 5 * SECOND, 1, "success", T0 + 400 * SECOND)
    verdict = _check([*runs, late], [*ledger, _ran(late)])
    assert verdict.violations["within_rules"] == [
        f"run late: recorded {late.created_at}, past the catch-up window"
    ]
