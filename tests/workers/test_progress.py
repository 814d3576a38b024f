"""Progress reports from handlers: a shell's `::progress` lines, a python function's
`progress(...)`; pure, no Django."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from handler_contract.base import BufferedLogSink, HandlerContext
from handler_contract.registry import handler
from workers.handlers import run_handler
from workers.handlers.progress_lines import progress_line_parse, progress_value


def test_progress_lines_parse():
    assert progress_line_parse("::progress 40 copying files") == (40.0, "copying files")
    assert progress_line_parse("::progress 12.5") == (12.5, "")
    assert progress_line_parse("::progress 150 over") == (100.0, "over")  # brought within
    assert progress_line_parse("::progress -3") == (0.0, "")
    assert progress_line_parse("::progress soon") is None  # not a number: a log line
    assert progress_line_parse("::progressive 40") is None
    assert progress_line_parse("echo ::progress 40") is None


def test_progress_values_are_checked():
    with pytest.raises(TypeError):
        progress_value("40")
    with pytest.raises(ValueError):
        progress_value(float("nan"))
    with pytest.raises(TypeError):
        progress_value(40, 7)
    assert progress_value(40, "x" * 1000)[1] == "x" * 500


def ctx_with_progress(**extra: Any) -> tuple[HandlerContext, BufferedLogSink, list]:
    reports: list[tuple[float, str]] = []
    sink = BufferedLogSink(max_bytes=1 << 20)
    ctx = HandlerContext(
        execution_id="e1",
        attempt=1,
        timeout_seconds=20,
        parameters={},
        log=sink,
        cancel_event=threading.Event(),
        progress=lambda percent, message="": reports.append((percent, message)),
        **extra,
    )
    return ctx, sink, reports


@pytest.mark.needs_os_tool("bubblewrap")
def test_a_shell_commands_progress_lines_are_reports_not_log_lines():
    script = (
        "echo start; echo '::progress 40 copying s3cr3t'; echo '::progress soon';"
        " echo '::progress 100'"
    )
    ctx, sink, reports = ctx_with_progress(secrets_to_mask=("s3cr3t",))
    outcome = run_handler({"type": "shell", "command": ["sh", "-c", script]}, ctx)
    assert outcome.status == "success"
    assert reports == [(40.0, "copying ****"), (100.0, "")]
    assert sink.stream_text("stdout") == "start\n::progress soon\n"
    # The last line was a report: the result is not read from it.
    assert outcome.result == {"exit_code": 0}


@pytest.mark.needs_os_tool("bubblewrap")
def test_without_a_reporter_every_line_is_logged():
    ctx, sink, _ = ctx_with_progress()
    ctx.progress = None
    run_handler({"type": "shell", "command": ["sh", "-c", "echo '::progress 5'"]}, ctx)
    assert sink.stream_text("stdout") == "::progress 5\n"


@handler("tests.progress_reporter")
def _reporting(progress) -> dict:
    progress(25, "a quarter")
    progress(75)
    return {}


def test_a_python_function_that_declares_progress_gets_the_reporter():
    ctx, _sink, reports = ctx_with_progress()
    outcome = run_handler({"type": "python", "callable": "tests.progress_reporter"}, ctx)
    assert outcome.status == "success"
    assert reports == [(25, "a quarter"), (75, "")]
    ctx.progress = None  # nothing listens: the call still works
    assert run_handler({"type": "python", "callable": "tests.progress_reporter"}, ctx).succeeded
