"""What a run used, measured against tasks that use a known amount: 200 MiB touched and about
0.5 s of CPU burnt, in the shell sandbox and in a python handler; stored by the finish."""

from __future__ import annotations

import sys
import threading

import pytest

from handler_contract.base import BufferedLogSink, HandlerContext
from runs.finish import run_finish
from scheduler_app.services.claims import execution_claim
from scheduler_app.services.task_definitions import task_trigger
from tests import checkpoint_handlers  # noqa: F401  (registers the handlers)
from tests.factories import make_task
from workers.execute import execute_claimed
from workers.handlers.python import run_python
from workers.handlers.shell import run_shell
from workers.shell_sandbox import shell_sandbox_for

pytestmark = pytest.mark.timeout(60)
MIB = 1024**2
# A python run's figure is the pool process's peak growth over what it held at the start:
# pages the process frees while the run goes (the allocator, the collector) offset a few
# dozen KiB of it, so 200 MiB touched reads a hair under 200 MiB.
PYTHON_AT_LEAST = 199 * MIB
# Touches 200 MiB page by page, then burns 0.5 s of CPU.
ALLOCATE_AND_BURN = (
    "import time\n"
    "block = bytearray(200 * 1024 * 1024)\n"
    "for offset in range(0, len(block), 4096): block[offset] = 1\n"
    "started = time.process_time()\n"
    "while time.process_time() - started < 0.5: pass\n"
)


def _ctx(**overrides) -> HandlerContext:
    values = {
        "execution_id": "usage",
        "attempt": 1,
        "timeout_seconds": 30.0,
        "parameters": {},
        "log": BufferedLogSink(1 << 20),
        "cancel_event": threading.Event(),
    }
    values.update(overrides)
    return HandlerContext(**values)


def _assert_known_usage(outcome, *, at_least: int = 200 * MIB) -> None:
    assert outcome.status == "success", outcome
    assert at_least <= outcome.peak_memory_bytes < 400 * MIB, outcome.peak_memory_bytes
    assert outcome.cpu_seconds >= 0.3, outcome.cpu_seconds
    assert outcome.cpu_seconds < 5, outcome.cpu_seconds


def test_a_sandboxed_shell_run_reports_its_cpu_and_peak_memory():
    ctx = _ctx()
    outcome = run_shell(
        {"command": ["python3", "-c", ALLOCATE_AND_BURN]},
        ctx,
        sandbox=shell_sandbox_for(egress_allowed=False),
    )
    _assert_known_usage(outcome)


def test_an_unsandboxed_shell_run_reports_its_cpu_and_peak_memory():
    from sandbox.options import ShellSandbox

    outcome = run_shell(
        {"command": [sys.executable, "-c", ALLOCATE_AND_BURN]},
        _ctx(),
        sandbox=ShellSandbox(mode="off"),
    )
    _assert_known_usage(outcome)


def test_two_python_runs_in_one_process_each_report_their_own_peak():
    config = {"type": "python", "callable": "test.allocate_and_burn"}
    first = run_python(config, _ctx(parameters={"mib": 200, "cpu_seconds": 0.5}))
    _assert_known_usage(first, at_least=PYTHON_AT_LEAST)
    # The process's lifetime peak is already 200 MiB higher: a small run must not inherit it.
    second = run_python(config, _ctx(parameters={"mib": 10, "cpu_seconds": 0.0}))
    assert second.peak_memory_bytes < 60 * MIB, second.peak_memory_bytes


@pytest.mark.django_db
def test_the_finish_stores_what_the_run_used(tenant):
    task = make_task(
        tenant,
        name="allocating",
        schedule={"type": "manual"},
        handler={"type": "python", "callable": "test.allocate_and_burn"},
        parameters={"mib": 200, "cpu_seconds": 0.5},
    )
    run = task_trigger(task=task)
    claim = execution_claim(execution_id=run.id, worker_id="w-usage", lease_seconds=60)
    executed = execute_claimed(claim, stop_requested=False)
    run_finish(claim=claim, outcome=executed.outcome)
    run.refresh_from_db()
    assert run.status == "success"
    assert PYTHON_AT_LEAST <= run.peak_memory_bytes < 400 * MIB
    assert run.cpu_seconds >= 0.3


def test_a_small_sandboxed_task_of_a_large_worker_reads_small():
    """Regression: bwrap's ru_maxrss keeps the high-water mark of the image it had before its
    exec, a copy of the worker process, so every shell run of a 300 MiB worker read >= 300 MiB."""
    ballast = bytearray(300 * MIB)
    for offset in range(0, len(ballast), 4096):
        ballast[offset] = 1
    outcome = run_shell(
        {"command": ["sh", "-c", "sleep 0.3"]},
        _ctx(),
        sandbox=shell_sandbox_for(egress_allowed=False),
    )
    del ballast
    assert outcome.status == "success", outcome
    assert outcome.peak_memory_bytes is not None
    assert outcome.peak_memory_bytes < 50 * MIB, outcome.peak_memory_bytes
