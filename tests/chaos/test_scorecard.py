"""How the chaos scorecard dates a resumption (tests/chaos/harness.py, resumed_seconds)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from tests.chaos.harness import resumed_seconds
from tests.ledger import ledger_counts, ledger_starts

HEAL = datetime(2026, 12, 1, 12, 0, 0, 500_000, tzinfo=UTC)


def _run(run_id: str, due_after_heal: float, started_after_heal: float | None):
    """A run row as settle reads it: due and (row-)started relative to the heal."""
    started = None if started_after_heal is None else HEAL + timedelta(seconds=started_after_heal)
    return SimpleNamespace(
        id=run_id, scheduled_at=HEAL + timedelta(seconds=due_after_heal), started_at=started
    )


def _at(offset: float) -> float:
    return (HEAL + timedelta(seconds=offset)).timestamp()


def test_a_run_claimed_ahead_is_dated_by_its_handler_not_its_claim():
    # Due 0.2 s after the heal, claimed (started_at stamped) 0.3 s before it; its handler
    # started at its time. The row would say -0.3 s; the handler says 0.2 s.
    runs = [_run("a", 0.2, -0.3), _run("b", 1.2, 0.7)]
    assert resumed_seconds(runs, {"a": _at(0.21), "b": _at(1.2)}, HEAL) == 0.21


def test_runs_due_before_the_heal_and_handler_starts_before_it_do_not_count():
    runs = [_run("old", -0.5, -0.5), _run("early", 0.4, -0.1), _run("next", 1.4, 1.4)]
    starts = {"old": _at(0.1), "early": _at(-0.1), "next": _at(1.45)}
    assert resumed_seconds(runs, starts, HEAL) == 1.45


def test_nothing_resumed_or_nothing_healed_is_none():
    runs = [_run("a", 0.5, 0.5)]
    assert resumed_seconds(runs, {}, HEAL) is None  # recorded, no handler ever started
    assert resumed_seconds(runs, {"a": _at(0.5)}, None) is None


def test_the_ledger_keeps_each_executions_first_start(tmp_path):
    ledger = tmp_path / "ledger.txt"
    ledger.write_text("a 1 10 100.5\nb 1 11 101.0\na 1 12 100.25\n")
    assert ledger_counts(ledger) == {"a": 2, "b": 1}
    assert ledger_starts(ledger) == {"a": 100.25, "b": 101.0}
