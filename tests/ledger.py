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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from handler_contract.base import HandlerContext
from handler_contract.registry import handler

MODULES = "workers.handlers.builtin,tests.ledger"


@handler("ledger")
def ledger(
    path: str, seconds: float = 0.0, claims: bool = False, *, context: HandlerContext
) -> dict[str, Any]:
    """`claims`: the line also names the claim the run runs under (its row's claim_token,
    read here), so that a checker can count executions per (run, claim): a run put back to
    queued as the same attempt after its worker died runs again under a new claim."""
    started = time.time()
    claim = f" {_claim_token(context.execution_id)}" if claims else ""
    # O_APPEND writes of one short line are atomic between the worker's pool processes.
    with open(path, "a", encoding="utf-8") as file:
        file.write(f"{context.execution_id} {context.attempt} {os.getpid()}{claim} {started:.6f}\n")
    # Then stay busy, so that a fault can catch the run in flight.
    context.cancel_event.wait(float(seconds))
    return {}


def _claim_token(execution_id: str) -> str:
    from scheduler_app.models import TaskExecution

    token = (
        TaskExecution.platform.filter(id=execution_id).values_list("claim_token", flat=True).first()
    )
    return str(token)


def ledger_env() -> dict[str, str]:
    return {"PYTHON_HANDLER_MODULES": MODULES}


def _lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def ledger_counts(path: Path) -> collections.Counter:
    """How many times each execution's handler ran."""
    return collections.Counter(fields[0] for fields in _lines(path))


@dataclass(frozen=True)
class LedgerEntry:
    """One handler start: the run, its attempt, the pool process, the claim (with `claims`),
    and when (Unix time, this host's clock)."""

    execution_id: str
    attempt: int
    pid: int
    claim: str | None
    started: float


def ledger_entries(path: Path) -> list[LedgerEntry]:
    entries = []
    for fields in _lines(path):
        claim = fields[3] if len(fields) == 5 else None
        entries.append(
            LedgerEntry(fields[0], int(fields[1]), int(fields[2]), claim, float(fields[-1]))
        )
    return entries


def ledger_starts(path: Path) -> dict[str, float]:
    """When each execution's handler first started (Unix time, this host's clock)."""
    starts: dict[str, float] = {}
    for execution_id, *_, started in _lines(path):
        starts[execution_id] = min(float(started), starts.get(execution_id, float("inf")))
    return starts
