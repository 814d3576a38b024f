"""Sandboxing of shell handlers with real processes: a fork bomb and a memory hog are
contained by rlimits (run as an unprivileged user, since root ignores RLIMIT_NPROC), the
process group is gone afterwards, and the calling process (the worker) carries on."""

from __future__ import annotations

import os
import pwd
import subprocess
import threading
import time

import pytest

from handler_contract.base import BufferedLogSink, HandlerContext
from sandbox.processes import live_group_members
from tests.processes import host_pids_running, unique_sleep_seconds, wait_until
from workers.handlers.shell import run_shell

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="switching to an unprivileged user needs root"
)


def _nobody() -> str:
    return pwd.getpwnam("nobody").pw_name


def _context(timeout: float) -> HandlerContext:
    return HandlerContext(
        execution_id="sandbox",
        attempt=1,
        timeout_seconds=timeout,
        parameters={},
        log=BufferedLogSink(max_bytes=1024 * 1024),
        cancel_event=threading.Event(),
    )


@needs_root
def test_a_fork_bomb_is_contained_and_the_worker_survives():
    bomb = "bomb() { bomb | bomb & }; bomb; sleep 30"
    ctx = _context(timeout=4)
    before = set(_live_processes_of(pwd.getpwnam("nobody").pw_uid))
    outcome = run_shell(
        {
            "command": ["sh", "-c", bomb],
            "resource_requirements": {"processes": 64, "cpu_seconds": 20},
        },
        ctx,
        kill_grace_seconds=0.5,
        run_as=_nobody(),
    )
    assert outcome.status in ("timed_out", "failed", "success")
    uid = pwd.getpwnam("nobody").pw_uid
    # SIGKILL delivery and reaping by init are asynchronous.
    wait_until(
        lambda: not set(_live_processes_of(uid)) - before,
        timeout=10,
        interval=0.2,
        message="the bomb processes to be gone",
    )
    # The worker can still start processes.
    assert subprocess.run(["true"], check=False).returncode == 0


def _live_processes_of(uid: int) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as fh:
                fields = dict(line.split(":", 1) for line in fh if ":" in line)
        except OSError:
            continue
        state = fields.get("State", "").split()
        if int(fields.get("Uid", "-1 0").split()[0]) == uid and state[:1] not in (["Z"], ["X"]):
            found.append(pid)
    return found


@pytest.mark.needs_os_tool("bubblewrap")
@needs_root
def test_a_memory_hog_fails_inside_its_limit():
    ctx = _context(timeout=30)
    hog = "import sys; b = bytearray(2 * 1024**3); sys.exit(0)"
    outcome = run_shell(
        {
            "command": ["python3", "-c", hog],
            "resource_requirements": {"memory_bytes": 256 * 1024**2},
        },
        ctx,
        run_as=_nobody(),
    )
    assert outcome.status == "failed"
    assert "MemoryError" in ctx.log.text()


@pytest.mark.needs_os_tool("bubblewrap")
@needs_root
def test_a_root_worker_runs_the_sandbox_as_the_run_as_user_not_root():
    ctx = _context(timeout=30)
    marker = unique_sleep_seconds()
    outcomes = []
    thread = threading.Thread(
        target=lambda: outcomes.append(
            run_shell(
                {"command": ["sh", "-c", f"id -un; pwd; exec sleep {marker}"]},
                ctx,
                run_as=_nobody(),
            )
        )
    )
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not (pids := host_pids_running(marker)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pids, "the task did not start"
        with open(f"/proc/{pids[0]}/status") as fh:
            status = dict(line.split(":", 1) for line in fh if ":" in line)
        # Outside the sandbox the task is `nobody`; inside it is the sandbox's own user.
        assert int(status["Uid"].split()[0]) == pwd.getpwnam("nobody").pw_uid
        assert status["CapEff"].strip() == "0000000000000000"
    finally:
        ctx.cancel_event.set()
        thread.join(timeout=20)
    assert ctx.log.stream_text("stdout").splitlines() == ["task", "/task"]
    assert outcomes[0].status == "cancelled"


def test_an_unknown_run_as_user_is_a_permanent_config_failure():
    outcome = run_shell({"command": ["true"]}, _context(5), run_as="no-such-user-x")
    if os.geteuid() != 0:
        assert outcome.status == "success"  # unprivileged: run as the worker itself
        return
    assert outcome.status == "failed" and outcome.error_class == "invalid_config"
    assert not outcome.transient


def test_group_members_helper_sees_nothing_for_a_dead_group():
    assert live_group_members(2**22 + 12345) == []


@pytest.mark.needs_os_tool("bubblewrap")
@needs_root
def test_a_root_worker_sets_the_limits_of_another_users_sandbox_at_the_gate_when_it_may():
    """With CAP_SYS_RESOURCE a root worker sets the run-as user's rlimits at the start gate,
    without a `prlimit` exec in the chain; without it, `prlimit` stays in the chain. Either
    way the command runs under its limits."""
    from sandbox.argv import sandboxed_argv
    from sandbox.files import SandboxFiles
    from sandbox.gate import StartGate
    from sandbox.identity import resolve_identity
    from sandbox.profile import NETWORK_NONE
    from sandbox.rlimits import holds_cap_sys_resource, resolve_limits

    identity = resolve_identity(_nobody())
    with SandboxFiles(network=NETWORK_NONE, upstream=None) as files:
        gate = StartGate()
        argv = sandboxed_argv(
            ["true"], limits=resolve_limits({}), files=files, run_as=identity, gate=gate
        )
        gate.close()
    chained = any(part.endswith("prlimit") for part in argv)
    assert chained is not holds_cap_sys_resource()
    ctx = _context(timeout=30)
    outcome = run_shell(
        {
            "command": ["sh", "-c", "ulimit -n; ulimit -c"],
            "resource_requirements": {"open_files": 64},
        },
        ctx,
        run_as=_nobody(),
    )
    assert outcome.status == "success", outcome.error_message
    assert ctx.log.stream_text("stdout").splitlines() == ["64", "0"]
