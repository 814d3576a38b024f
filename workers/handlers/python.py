"""Python handler: call a registered function in the worker process.

* Arguments: the task parameters as keyword arguments, plus ``context=`` (the
  ``HandlerContext``), ``upstream_results=`` and ``progress=`` (``progress(percent,
  message="")`` reports the run's progress) when the function declares a parameter of that
  name. Parameters that the function cannot accept fail permanently before the call.
* Return value: dict -> result, None -> ``{}``, any other JSON value -> ``{"value": v}``.
* ``PermanentError`` -> failed, not retried; any other exception -> failed, retried.
* Timeout: on the main thread a one-shot ``ITIMER_REAL`` raises an internal ``BaseException``
  inside the function (so ``except Exception`` in user code does not swallow it); the previous
  SIGALRM handler and timer are restored afterwards. Signals can only be handled on the main
  thread, so elsewhere the function runs without a time limit and the caller's own hard limit
  (e.g. Celery's ``time_limit``) has to back it up.
* Checkpoints: ``context.checkpoint(state)`` keeps a JSON state at once (size-capped, masked);
  a later attempt of the same run reads it as ``context.resumed_from``. When the worker is
  preempted, ``context.preempted`` is set: a function that checkpoints and raises
  ``Preempted`` has its run handed back (the same attempt) instead of finished.
* Usage: the CPU seconds and the peak memory growth of the pool process over the call
  (``usage.InProcessUsage``) go with the outcome.
* Cancellation is cooperative: a function that accepts ``context`` should watch
  ``context.cancel_event``. If the event is set when the function returns or raises, the
  outcome is "cancelled", because the caller has already given up on the result.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType
from typing import Any

from handler_contract.base import (
    PREEMPTED,
    STATUS_CANCELLED,
    STATUS_FAILED,
    STATUS_SUCCESS,
    STATUS_TIMED_OUT,
    HandlerContext,
    HandlerOutcome,
    PermanentError,
    Preempted,
    clip,
    mask_outcome,
    masking_sink,
    to_json_safe,
)
from handler_contract.python_signature import WORKER_ARGUMENTS, signature
from handler_contract.registry import get_handler

from .progress_lines import progress_value
from .usage import InProcessUsage, measured

MAX_TRACEBACK_LINES = 60


class _HandlerTimeout(BaseException):
    """Raised from the SIGALRM handler; BaseException so user ``except Exception`` misses it."""


def _raise_timeout(signum: int, frame: FrameType | None) -> None:
    raise _HandlerTimeout()


def run_python(config: dict[str, Any], ctx: HandlerContext) -> HandlerOutcome:
    return mask_outcome(_run_python(config, ctx), ctx.secrets_to_mask)


def _run_python(config: dict[str, Any], ctx: HandlerContext) -> HandlerOutcome:
    name = config.get("callable")
    try:
        fn = get_handler(name) if isinstance(name, str) else None
    except KeyError:
        fn = None
    if fn is None:
        return HandlerOutcome(
            status=STATUS_FAILED,
            error_class="handler_not_found",
            error_message=f"no python handler registered as {name!r}",
            transient=False,
        )
    if ctx.cancel_event.is_set():
        return _cancelled("cancelled before start")

    log = masking_sink(ctx)
    # The function gets a context whose log masks secrets, like the other handlers' output.
    call_ctx = dataclasses.replace(ctx, log=log) if log is not ctx.log else ctx
    kwargs, problem = _build_arguments(fn, call_ctx)
    if problem:
        return HandlerOutcome(
            status=STATUS_FAILED,
            error_class="invalid_parameters",
            error_message=f"parameters do not fit python handler {name!r}: {problem}",
            transient=False,
        )

    timeout = float(ctx.timeout_seconds)
    use_alarm = threading.current_thread() is threading.main_thread() and timeout > 0
    log.write("system", f"calling python handler {name!r}")
    started = time.monotonic()
    usage = InProcessUsage().start()
    try:
        value = _call_with_alarm(fn, kwargs, timeout) if use_alarm else fn(**kwargs)
    except _HandlerTimeout:
        log.write("system", f"timed out after {timeout:g}s")
        return measured(
            HandlerOutcome(
                status=STATUS_TIMED_OUT,
                error_class="timeout",
                error_message=f"python handler {name!r} timed out after {timeout:g}s",
                transient=True,
            ),
            *usage.stop(),
        )
    except Preempted as exc:
        log.write("system", "stopped for the worker's preemption")
        return measured(
            HandlerOutcome(
                status=STATUS_FAILED,
                error_class=PREEMPTED,
                error_message=clip(f"stopped for the worker's preemption: {exc}".rstrip(": ")),
                transient=True,
            ),
            *usage.stop(),
        )
    except (Exception, SystemExit) as exc:
        if ctx.cancel_event.is_set():
            return _cancelled(f"cancelled (the handler raised {type(exc).__name__})")
        _log_traceback(log, exc)
        return measured(
            HandlerOutcome(
                status=STATUS_FAILED,
                error_class=f"exception:{type(exc).__name__}",
                error_message=clip(f"{type(exc).__name__}: {exc}"),
                transient=not isinstance(exc, PermanentError),
            ),
            *usage.stop(),
        )
    cpu_seconds, peak_memory_bytes = usage.stop()
    elapsed = time.monotonic() - started
    if ctx.cancel_event.is_set():
        return _cancelled(f"cancelled after {elapsed:.1f}s")

    if value is None:
        result: Any = {}
    elif isinstance(value, dict):
        result = value
    else:
        result = {"value": value}
    try:
        result = to_json_safe(result)
    except (TypeError, ValueError) as exc:
        return HandlerOutcome(
            status=STATUS_FAILED,
            error_class="invalid_result",
            error_message=clip(f"python handler {name!r} returned a non-JSON value: {exc}"),
            transient=False,
        )
    log.write("system", f"python handler {name!r} returned after {elapsed:.1f}s")
    return HandlerOutcome(
        status=STATUS_SUCCESS,
        result=result,
        cpu_seconds=cpu_seconds,
        peak_memory_bytes=peak_memory_bytes,
    )


def _no_progress(percent: float, message: str = "") -> None:
    """What `progress` is where nothing listens (the value is still checked)."""
    progress_value(percent, message)


def _build_arguments(
    fn: Callable[..., Any], ctx: HandlerContext
) -> tuple[dict[str, Any], str | None]:
    kwargs: dict[str, Any] = dict(ctx.parameters or {})
    # Some builtins have no signature (None); the call itself then complains.
    sig = signature(fn)
    if sig is None:
        return kwargs, None
    extras = {
        "context": ctx,
        "upstream_results": ctx.upstream_results,
        "progress": ctx.progress or _no_progress,
    }
    for arg in WORKER_ARGUMENTS:
        param = sig.parameters.get(arg)
        if param is None or param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            continue
        if arg in kwargs:
            return kwargs, f"parameter {arg!r} is reserved for the worker"
        kwargs[arg] = extras[arg]
    try:
        sig.bind(**kwargs)
    except TypeError as exc:
        return kwargs, str(exc)
    return kwargs, None


def _call_with_alarm(fn: Callable[..., Any], kwargs: dict[str, Any], timeout: float) -> Any:
    previous_handler = signal.signal(signal.SIGALRM, _raise_timeout)
    previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, timeout)
    started = time.monotonic()
    try:
        try:
            return fn(**kwargs)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        _restore_alarm(previous_handler, previous_delay, previous_interval, started)


def _restore_alarm(
    previous_handler: Any, previous_delay: float, previous_interval: float, started: float
) -> None:
    # Our one-shot alarm may already be pending in the interpreter when we get here; if it
    # fires during the restore we swallow it and finish restoring (it can fire only once).
    for _ in range(3):
        try:
            signal.signal(signal.SIGALRM, previous_handler)
            if previous_delay > 0:
                remaining = previous_delay - (time.monotonic() - started)
                # An outer timer that expired meanwhile still fires (almost) at once.
                signal.setitimer(signal.ITIMER_REAL, max(remaining, 1e-3), previous_interval)
            return
        except _HandlerTimeout:
            continue


def _log_traceback(log: Any, exc: BaseException) -> None:
    lines = "".join(traceback.format_exception(exc)).splitlines()
    if len(lines) > MAX_TRACEBACK_LINES:
        skipped = len(lines) - MAX_TRACEBACK_LINES
        lines = [f"... {skipped} traceback lines skipped ...", *lines[-MAX_TRACEBACK_LINES:]]
    for line in lines:
        log.write("stderr", line)


def _cancelled(message: str) -> HandlerOutcome:
    return HandlerOutcome(
        status=STATUS_CANCELLED, error_class="cancelled", error_message=message, transient=False
    )
