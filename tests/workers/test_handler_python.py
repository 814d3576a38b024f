"""Python handler, registry and built-in demo handler tests."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import pytest

from handler_contract.base import HandlerContext, PermanentError
from handler_contract.registry import (
    HandlerRegistrationError,
    get_handler,
    handler,
    register,
    registered_names,
    unregister,
)
from workers.handlers import run_handler
from workers.handlers.python import run_python

pytestmark = pytest.mark.timeout(60)


class RecordingSink:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def write(self, stream: str, line: str) -> None:
        self.lines.append((stream, line))

    def stream(self, name: str) -> list[str]:
        return [line for stream, line in self.lines if stream == name]


def make_ctx(**overrides: Any) -> tuple[HandlerContext, RecordingSink]:
    sink = RecordingSink()
    values: dict[str, Any] = {
        "execution_id": "exec-7",
        "attempt": 1,
        "timeout_seconds": 10.0,
        "parameters": {},
        "log": sink,
        "cancel_event": threading.Event(),
    }
    values.update(overrides)
    return HandlerContext(**values), sink


def py(name: str) -> dict[str, Any]:
    return {"type": "python", "callable": name}


# Test handlers, registered once for this module.
SECRET = "pa55w0rd-xyz"


@handler("test.add")
def add(a: int, b: int = 10) -> dict[str, Any]:
    return {"sum": a + b}


@handler("test.with_context")
def with_context(x: int, context: HandlerContext) -> dict[str, Any]:
    context.log.write("stdout", f"working on {x} with {SECRET}")
    return {"x": x, "execution_id": context.execution_id, "attempt": context.attempt}


@handler("test.with_upstream")
def with_upstream(upstream_results: dict[str, Any] | None, factor: int = 1) -> dict[str, Any]:
    total = sum(r["n"] for r in (upstream_results or {}).values())
    return {"total": total * factor}


@handler("test.returns")
def returns(value: Any = None) -> Any:
    return value


@handler("test.returns_object")
def returns_object() -> Any:
    return {"when": object()}


@handler("test.raises")
def raises(message: str = "boom") -> None:
    raise ValueError(message)


@handler("test.raises_permanent")
def raises_permanent() -> None:
    raise PermanentError("bad input, do not retry")


@handler("test.sleeps")
def sleeps(seconds: float = 30) -> dict[str, Any]:
    time.sleep(seconds)
    return {"slept": seconds}


@handler("test.swallows_exceptions")
def swallows_exceptions() -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            time.sleep(0.05)
        except Exception:  # a careless handler must still be stoppable
            continue
    return {"finished": True}


@handler("test.busy")
def busy() -> None:
    while True:
        pass


@handler("test.var_kwargs")
def var_kwargs(**kwargs: Any) -> dict[str, Any]:
    return {"keys": sorted(kwargs)}


# --- calling convention -----------------------------------------------------------------


def test_parameters_are_passed_as_keyword_arguments() -> None:
    ctx, _ = make_ctx(parameters={"a": 1, "b": 2})
    outcome = run_python(py("test.add"), ctx)
    assert outcome.status == "success"
    assert outcome.result == {"sum": 3}


def test_context_is_passed_when_accepted_and_its_log_masks_secrets() -> None:
    ctx, sink = make_ctx(parameters={"x": 5}, attempt=3, secrets_to_mask=(SECRET,))
    outcome = run_python(py("test.with_context"), ctx)
    assert outcome.result == {"x": 5, "execution_id": "exec-7", "attempt": 3}
    assert sink.stream("stdout") == ["working on 5 with ****"]


def test_upstream_results_are_passed_when_accepted() -> None:
    ctx, _ = make_ctx(parameters={"factor": 2}, upstream_results={"a": {"n": 1}, "b": {"n": 4}})
    outcome = run_python(py("test.with_upstream"), ctx)
    assert outcome.result == {"total": 10}


def test_context_is_not_passed_through_var_kwargs() -> None:
    ctx, _ = make_ctx(parameters={"p": 1}, upstream_results={"u": {}})
    outcome = run_python(py("test.var_kwargs"), ctx)
    assert outcome.result == {"keys": ["p"]}


def test_unknown_parameter_fails_permanently_before_the_call() -> None:
    ctx, _ = make_ctx(parameters={"a": 1, "nope": 2})
    outcome = run_python(py("test.add"), ctx)
    assert outcome.status == "failed"
    assert outcome.error_class == "invalid_parameters"
    assert outcome.transient is False
    assert "nope" in outcome.error_message


def test_reserved_parameter_name_is_rejected() -> None:
    ctx, _ = make_ctx(parameters={"x": 1, "context": "mine"})
    outcome = run_python(py("test.with_context"), ctx)
    assert outcome.error_class == "invalid_parameters"


@pytest.mark.parametrize(
    ("value", "result"),
    [
        (None, {}),
        ({"k": "v"}, {"k": "v"}),
        (5, {"value": 5}),
        ("text", {"value": "text"}),
        ([1, 2], {"value": [1, 2]}),
        ((1, 2), {"value": [1, 2]}),
    ],
)
def test_return_values_become_results(value: Any, result: dict[str, Any]) -> None:
    ctx, _ = make_ctx(parameters={"value": value})
    outcome = run_python(py("test.returns"), ctx)
    assert outcome.status == "success"
    assert outcome.result == result


def test_non_json_result_fails_permanently() -> None:
    ctx, _ = make_ctx()
    outcome = run_python(py("test.returns_object"), ctx)
    assert outcome.status == "failed"
    assert outcome.error_class == "invalid_result"
    assert outcome.transient is False


def test_secrets_are_masked_in_results() -> None:
    ctx, _ = make_ctx(parameters={"value": {"token": SECRET}}, secrets_to_mask=(SECRET,))
    outcome = run_python(py("test.returns"), ctx)
    assert outcome.result == {"token": "****"}


# --- failures ---------------------------------------------------------------------------


def test_exception_is_a_transient_failure_with_masked_message() -> None:
    ctx, sink = make_ctx(parameters={"message": f"db password {SECRET} rejected"})
    ctx.secrets_to_mask = (SECRET,)
    outcome = run_python(py("test.raises"), ctx)
    assert outcome.status == "failed"
    assert outcome.error_class == "exception:ValueError"
    assert outcome.transient is True
    assert "db password **** rejected" in outcome.error_message
    assert SECRET not in outcome.error_message
    stderr = "\n".join(sink.stream("stderr"))
    assert "Traceback" in stderr
    assert SECRET not in stderr


def test_permanent_error_is_not_retried() -> None:
    ctx, _ = make_ctx()
    outcome = run_python(py("test.raises_permanent"), ctx)
    assert outcome.status == "failed"
    assert outcome.transient is False
    assert outcome.error_class == "exception:PermanentError"
    assert "do not retry" in outcome.error_message


def test_unregistered_callable_fails_permanently() -> None:
    ctx, _ = make_ctx()
    outcome = run_python(py("test.does_not_exist"), ctx)
    assert outcome.error_class == "handler_not_found"
    assert outcome.transient is False


# --- timeouts -----------------------------------------------------------------------------


def _require_main_thread() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("SIGALRM timeouts only work on the main thread")


@pytest.mark.parametrize("name", ["test.sleeps", "test.swallows_exceptions", "test.busy"])
def test_timeout_on_main_thread(name: str) -> None:
    _require_main_thread()
    ctx, _ = make_ctx(timeout_seconds=0.3)
    started = time.monotonic()
    outcome = run_python(py(name), ctx)
    assert outcome.status == "timed_out"
    assert outcome.error_class == "timeout"
    assert outcome.transient is True
    assert time.monotonic() - started < 2


def test_timeout_restores_previous_alarm_handler_and_timer() -> None:
    _require_main_thread()
    fired: list[int] = []

    def previous(signum: int, frame: Any) -> None:
        fired.append(signum)

    old = signal.signal(signal.SIGALRM, previous)
    try:
        signal.setitimer(signal.ITIMER_REAL, 30)
        ctx, _ = make_ctx(timeout_seconds=0.2)
        assert run_python(py("test.sleeps"), ctx).status == "timed_out"
        assert signal.getsignal(signal.SIGALRM) is previous
        remaining, _interval = signal.getitimer(signal.ITIMER_REAL)
        assert 25 < remaining <= 30

        # A successful call restores them too.
        ctx, _ = make_ctx(parameters={"a": 1})
        assert run_python(py("test.add"), ctx).status == "success"
        assert signal.getsignal(signal.SIGALRM) is previous
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 25
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert fired == []


def test_off_main_thread_runs_without_alarm() -> None:
    ctx, _ = make_ctx(parameters={"seconds": 0.5}, timeout_seconds=0.1)
    outcomes: list[Any] = []
    thread = threading.Thread(target=lambda: outcomes.append(run_python(py("test.sleeps"), ctx)))
    thread.start()
    thread.join(10)
    (outcome,) = outcomes
    assert outcome.status == "success"
    assert outcome.result == {"slept": 0.5}


# --- built-in demo handlers ---------------------------------------------------------------


def test_builtins_are_registered() -> None:
    assert {"noop", "echo", "sleep", "fail", "fail_permanently", "flaky"} <= registered_names()


def test_builtin_noop_and_echo() -> None:
    ctx, _ = make_ctx(parameters={"a": 1, "b": [2]})
    assert run_python(py("noop"), make_ctx()[0]).result == {}
    assert run_python(py("echo"), ctx).result == {"a": 1, "b": [2]}


def test_builtin_fail_and_fail_permanently() -> None:
    failed = run_python(py("fail"), make_ctx()[0])
    assert failed.status == "failed"
    assert failed.transient is True
    permanent = run_python(py("fail_permanently"), make_ctx()[0])
    assert permanent.status == "failed"
    assert permanent.transient is False


def test_builtin_flaky_succeeds_on_the_requested_attempt() -> None:
    params = {"succeed_on_attempt": 3}
    for attempt in (1, 2):
        ctx, _ = make_ctx(parameters=params, attempt=attempt)
        outcome = run_python(py("flaky"), ctx)
        assert outcome.status == "failed"
        assert outcome.transient is True
    ctx, _ = make_ctx(parameters=params, attempt=3)
    assert run_python(py("flaky"), ctx).result == {"attempt": 3}


def test_builtin_sleep_sleeps_and_is_cancellable() -> None:
    ctx, _ = make_ctx(parameters={"seconds": 0.1})
    assert run_python(py("sleep"), ctx).result == {"slept": 0.1, "interrupted": False}

    ctx, _ = make_ctx(parameters={"seconds": 30})
    timer = threading.Timer(0.2, ctx.cancel_event.set)
    timer.start()
    started = time.monotonic()
    try:
        outcome = run_python(py("sleep"), ctx)
    finally:
        timer.cancel()
    assert outcome.status == "cancelled"
    assert outcome.transient is False
    assert time.monotonic() - started < 2


def test_builtin_sleep_rejects_bad_seconds_permanently() -> None:
    ctx, _ = make_ctx(parameters={"seconds": "soon"})
    outcome = run_python(py("sleep"), ctx)
    assert outcome.status == "failed"
    assert outcome.transient is False


def test_cancel_before_start_does_not_call() -> None:
    calls: list[int] = []

    def counting() -> None:
        calls.append(1)

    register("test.counting", counting)
    try:
        ctx, _ = make_ctx()
        ctx.cancel_event.set()
        assert run_python(py("test.counting"), ctx).status == "cancelled"
        assert calls == []
    finally:
        unregister("test.counting")


# --- registry -----------------------------------------------------------------------------


def test_registering_a_different_function_under_a_taken_name_raises() -> None:
    def other() -> None:
        pass

    with pytest.raises(HandlerRegistrationError, match="already registered"):
        register("test.add", other)
    assert get_handler("test.add") is add


def test_registering_the_same_function_again_is_fine() -> None:
    assert register("test.add", add) is add
    assert handler("test.add")(add) is add


def test_invalid_names_are_rejected() -> None:
    with pytest.raises(HandlerRegistrationError):
        register("", add)
    with pytest.raises(HandlerRegistrationError):
        register("has space", add)


def test_get_handler_unknown_name_raises_key_error() -> None:
    with pytest.raises(KeyError):
        get_handler("test.never-registered")


def test_dispatcher_runs_python_and_validates_the_name() -> None:
    ctx, _ = make_ctx(parameters={"a": 2})
    assert run_handler(py("test.add"), ctx).result == {"sum": 12}
    missing = run_handler(py("test.missing"), ctx)
    assert missing.error_class == "invalid_config"
    assert "handler.callable" in missing.error_message


# -- which handlers read their DAG node's upstream results ---------------------------------
@pytest.mark.parametrize(
    ("config", "reads"),
    [
        (py("test.with_upstream"), True),
        (py("test.with_context"), True),  # the context carries them too
        (py("test.add"), False),
        (py("test.var_kwargs"), False),  # **parameters never gets them (test above)
        (py("noop"), False),
        (py("no.such.handler"), True),  # in doubt: the handler reports the problem itself
        ({"type": "python"}, True),
        ({"type": "shell", "command": "cat"}, True),
        ({"type": "http", "url": "http://example.invalid/"}, True),
    ],
)
def test_which_handlers_read_upstream_results(config: dict[str, Any], reads: bool) -> None:
    from handler_contract.python_signature import python_handler_reads_upstream

    assert python_handler_reads_upstream(config) is reads
