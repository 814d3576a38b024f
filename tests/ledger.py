"""A Python handler for fault-injection tests: each attempt appends its execution id (and
the wall-clock time its handler started) to a ledger file before returning, so a test can
prove that no attempt ran twice (the claim's promise) even while Redis, PostgreSQL or the
processes around it fail, and can date when handlers really started.

Workers load it with PYTHON_HANDLER_MODULES (`ledger_env`); the test process imports this
module so that the API accepts tasks naming it.
"""

from __future__ import annotations

import collections
import os
import time
from pathlib import Path
from typing import Any

from handler_contract.base import HandlerContext
from handler_contract.registry import handler

MODULES = "workers.handlers.builtin,tests.ledger"


@handler("ledger")
def ledger(path: str, seconds: float = 0.0, *, context: HandlerContext) -> dict[str, Any]:
    started = time.time()
    # O_APPEND writes of one short line are atomic between the worker's pool processes.
    with open(path, "a", encoding="utf-8") as file:
        file.write(f"{context.execution_id} {context.attempt} {os.getpid()} {started:.6f}\n")
    # Then stay busy, so that a fault can catch the run in flight.
    context.cancel_event.wait(float(seconds))
    return {}


def ledger_env() -> dict[str, str]:
    return {"PYTHON_HANDLER_MODULES": MODULES}


def _lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def ledger_counts(path: Path) -> collections.Counter:
    """How many times each execution's handler ran."""
    return collections.Counter(fields[0] for fields in _lines(path))


def ledger_starts(path: Path) -> dict[str, float]:
    """When each execution's handler first started (Unix time, this host's clock)."""
    starts: dict[str, float] = {}
    for execution_id, *_, started in _lines(path):
        starts[execution_id] = min(float(started), starts.get(execution_id, float("inf")))
    return starts
