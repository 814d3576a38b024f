"""A Python handler for fault-injection tests: each attempt appends its execution id to a
ledger file before returning, so a test can prove that no attempt ran twice (the claim's
promise) even while Redis, PostgreSQL or the processes around it fail.

Workers load it with PYTHON_HANDLER_MODULES (`ledger_env`); the test process imports this
module so that the API accepts tasks naming it.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path
from typing import Any

from handler_contract.base import HandlerContext
from handler_contract.registry import handler

MODULES = "workers.handlers.builtin,tests.ledger"


@handler("ledger")
def ledger(path: str, seconds: float = 0.0, *, context: HandlerContext) -> dict[str, Any]:
    # O_APPEND writes of one short line are atomic between the worker's pool processes.
    with open(path, "a", encoding="utf-8") as file:
        file.write(f"{context.execution_id} {context.attempt} {os.getpid()}\n")
    # Then stay busy, so that a fault can catch the run in flight.
    context.cancel_event.wait(float(seconds))
    return {}


def ledger_env() -> dict[str, str]:
    return {"PYTHON_HANDLER_MODULES": MODULES}


def ledger_counts(path: Path) -> collections.Counter:
    """How many times each execution's handler ran."""
    lines = path.read_text().splitlines() if path.exists() else []
    return collections.Counter(line.split()[0] for line in lines)
