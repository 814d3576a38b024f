"""The expression budget: what a user-supplied path or template may be, and what evaluating
it may spend.

One budget for every path and template a tenant writes (a JSONPath condition, a `map_over`
field, an idempotency key template, a later templated flow-control key): limits on its text
(length, segments, descendant segments) that are checked when it is saved and again before it
is evaluated, and limits on the evaluation (nodes of the document visited, CPU time, characters
rendered) that a `Meter` enforces while it runs.

The time limit is CPU time of the evaluating thread (`time.thread_time`), not wall time: the
evaluation reads nothing (its document is loaded before the meter starts), so CPU is what it
costs, and a loaded machine (two cores shared by workers, beat and web) does not fail a
legitimate condition at random. The node budget is the deterministic limit (the same query
over the same document always stops at the same place); the clock is the backstop for work
no node count sees (comparing two large values, a long regular expression match).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

# How many units are spent between two looks at the clock (thread_time costs ~0.3 µs).
_CLOCK_EVERY = 256


@dataclass(frozen=True)
class ExpressionBudget:
    # The text: checked when saved and before each evaluation.
    max_chars: int = 512
    max_segments: int = 16
    max_descendant_segments: int = 1
    # The evaluation.
    max_nodes: int = 100_000
    cpu_seconds: float = 0.5
    # A rendered template, and a regular expression given at evaluation time (by the data).
    max_output_chars: int = 1024 * 1024
    max_pattern_chars: int = 512


DEFAULT_BUDGET = ExpressionBudget()


class BudgetExceeded(ValueError):
    """An expression is over its budget. `budget` names which one: `length`, `segments`,
    `descendant_segments`, `pattern`, `nodes`, `time` or `output`."""

    def __init__(self, budget: str, message: str) -> None:
        super().__init__(message)
        self.budget = budget
        self.message = message


class Meter:
    """What one evaluation has spent. A unit is one node of the document visited (or produced
    by a selector, or one candidate a filter is tested on), or 64 characters a regular
    expression reads."""

    __slots__ = ("_next_clock", "budget", "deadline", "spent")

    def __init__(self, budget: ExpressionBudget) -> None:
        self.budget = budget
        self.spent = 0
        self._next_clock = _CLOCK_EVERY
        self.deadline = time.thread_time() + budget.cpu_seconds

    def spend(self, units: int = 1) -> None:
        self.spent += units
        if self.spent > self.budget.max_nodes:
            raise BudgetExceeded(
                "nodes",
                f"visited more than {self.budget.max_nodes} nodes of the document "
                "(the node budget)",
            )
        if self.spent >= self._next_clock:
            self._next_clock = self.spent + _CLOCK_EVERY
            self.clock_check()

    def clock_check(self) -> None:
        if time.thread_time() > self.deadline:
            raise BudgetExceeded(
                "time", f"took more than {self.budget.cpu_seconds:g} s of CPU (the time budget)"
            )


_current: ContextVar[Meter | None] = ContextVar("expression_meter", default=None)


@contextmanager
def metered(budget: ExpressionBudget) -> Iterator[Meter]:
    """Evaluations inside spend from one new meter (compiled queries are shared and cached,
    so the meter is found through a context variable, not held by the query)."""
    meter = Meter(budget)
    token = _current.set(meter)
    try:
        yield meter
    finally:
        _current.reset(token)


def spend(units: int = 1) -> None:
    """Charge the current evaluation; outside `metered` (a query compiled to be checked, never
    evaluated) there is nothing to charge."""
    meter = _current.get()
    if meter is not None:
        meter.spend(units)


def current_budget() -> ExpressionBudget:
    """The budget of the evaluation under way (the default one outside any)."""
    meter = _current.get()
    return DEFAULT_BUDGET if meter is None else meter.budget


def text_check(text: str, *, budget: ExpressionBudget, what: str) -> None:
    if len(text) > budget.max_chars:
        raise BudgetExceeded(
            "length",
            f"{what} is {len(text)} characters long; at most {budget.max_chars} are allowed",
        )
