"""Demo handlers, registered on import; handy for trying out retries, timeouts and cancels."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from handler_contract.base import HandlerContext, PermanentError
from handler_contract.registry import handler


@handler("noop")
def noop() -> dict[str, Any]:
    return {}


@handler("echo")
def echo(**parameters: Any) -> dict[str, Any]:
    return parameters


@handler("sleep")
def sleep(seconds: float = 1.0, *, context: HandlerContext) -> dict[str, Any]:
    try:
        seconds = float(seconds)
    except (TypeError, ValueError):
        raise PermanentError(f"seconds must be a number, got {seconds!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise PermanentError(f"seconds must be a finite number >= 0, got {seconds!r}")
    # Waiting on the event instead of time.sleep() lets a cancel end the sleep at once.
    cancelled = context.cancel_event.wait(seconds)
    return {"slept": seconds, "interrupted": cancelled}


@handler("steps")
def steps(
    count: int = 5,
    seconds_per_step: float = 0.5,
    *,
    context: HandlerContext,
    progress: Callable[..., None],
) -> dict[str, Any]:
    """Works through `count` steps, reporting its progress after each (cancellable)."""
    count = int(count)
    for done in range(1, count + 1):
        if context.cancel_event.wait(float(seconds_per_step)):
            return {"steps": done - 1, "interrupted": True}
        progress(100 * done / count, f"step {done} of {count}")
    return {"steps": count, "interrupted": False}


@handler("fail")
def fail(message: str = "failing on purpose") -> None:
    raise RuntimeError(message)


@handler("fail_permanently")
def fail_permanently(message: str = "failing permanently on purpose") -> None:
    raise PermanentError(message)


@handler("flaky")
def flaky(
    succeed_on_attempt: int = 2, *, context: HandlerContext, **_parameters: Any
) -> dict[str, Any]:
    """Fails until the given attempt; other parameters (a region an idempotency key names)
    are taken and ignored, so it can stand in for a real task."""
    if context.attempt < int(succeed_on_attempt):
        raise RuntimeError(
            f"attempt {context.attempt} fails; attempt {int(succeed_on_attempt)} will succeed"
        )
    return {"attempt": context.attempt}


@handler("fail_permanently_before")
def fail_permanently_before(
    succeed_on_attempt: int = 2, *, context: HandlerContext
) -> dict[str, Any]:
    """Fails with an error the worker does not retry, until the given attempt (what a DAG's
    `retry` failure policy retries)."""
    if context.attempt < int(succeed_on_attempt):
        raise PermanentError(
            f"attempt {context.attempt} fails; attempt {int(succeed_on_attempt)} will succeed"
        )
    return {"attempt": context.attempt}


@handler("upstream_echo")
def upstream_echo(
    *, upstream_results: dict[str, Any] | None = None, **parameters: Any
) -> dict[str, Any]:
    """A DAG node that returns its parameters and what its upstream nodes returned."""
    return {**parameters, "upstream": upstream_results}
