"""Python handlers for the checkpoint and resource-usage tests, run by this process and by
real workers (`checkpoint_env`: PYTHON_HANDLER_MODULES). The test process imports this module
so that the API accepts tasks naming them."""

from __future__ import annotations

import time
from typing import Any

from handler_contract.base import HandlerContext, Preempted
from handler_contract.registry import handler

MODULES = "workers.handlers.builtin,tests.checkpoint_handlers"
MIB = 1024**2


def checkpoint_env() -> dict[str, str]:
    return {"PYTHON_HANDLER_MODULES": MODULES}


@handler("test.checkpointed_steps")
def checkpointed_steps(
    steps: int = 10, step_seconds: float = 0.2, *, context: HandlerContext
) -> dict[str, Any]:
    """Step through `steps`, checkpointing after each; resumes from the last checkpoint. When
    the worker is preempted, it checkpoints once more (saying so) and stops."""
    resumed = context.resumed_from
    start = resumed["next"] if resumed else 0
    for step in range(start, steps):
        context.cancel_event.wait(step_seconds)
        if context.cancel_event.is_set():
            return {"cancelled_at": step}
        context.checkpoint({"next": step + 1, "attempt": context.attempt})
        if context.preempted.is_set():
            context.checkpoint({"next": step + 1, "attempt": context.attempt, "preempted": True})
            raise Preempted(f"stopped after step {step + 1}")
    return {"resumed_from": resumed, "done": steps}


@handler("test.checkpoint_then_hang")
def checkpoint_then_hang(note: str = "", *, context: HandlerContext) -> dict[str, Any]:
    """Checkpoint (a secret parameter, too: it must rest masked), then outlive the timeout;
    the next attempt says what it resumed from."""
    if context.resumed_from is not None:
        return {"resumed_from": context.resumed_from}
    context.checkpoint({"done": 3, "note": note})
    time.sleep(30)
    return {}


@handler("test.checkpoint_bytes")
def checkpoint_bytes(size: int, *, context: HandlerContext) -> dict[str, Any]:
    context.checkpoint({"blob": "x" * size})
    return {"saved": size}


@handler("test.allocate_and_burn")
def allocate_and_burn(mib: int = 200, cpu_seconds: float = 0.5) -> dict[str, Any]:
    """Touch `mib` MiB (every page, so it is resident) and burn `cpu_seconds` of CPU."""
    block = bytearray(mib * MIB)
    for offset in range(0, len(block), 4096):
        block[offset] = 1
    started = time.process_time()
    while time.process_time() - started < cpu_seconds:
        pass
    return {"touched_mib": mib}


@handler("test.preempted_unasked")
def preempted_unasked() -> None:
    raise Preempted("no one asked")
