"""Shell handler tests: real processes, real signals, real pipes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from typing import Any

import pytest

from handler_contract.base import BufferedLogSink, HandlerContext
from sandbox.options import ShellSandbox
from sandbox.processes import live_group_members
from sandbox.rlimits import DEFAULT_LIMITS
from tests.processes import host_pids_running, unique_sleep_seconds, wait_until
from workers.handlers import run_handler
from workers.handlers.shell import run_shell
from workers.handlers.shell_environment import SAFE_PATH
from workers.handlers.shell_lines import MAX_LOG_LINE_BYTES
from workers.handlers.shell_workdirs import WORKDIR_PREFIX, remove_stale_workdirs

UNSANDBOXED = ShellSandbox(mode="off")

pytestmark = pytest.mark.timeout(60)


class RecordingSink:
    """A sink that masks nothing itself, to prove the handler does the masking."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def write(self, stream: str, line: str) -> None:
        with self._lock:
            self.lines.append((stream, line))

    def stream(self, name: str) -> list[str]:
        return [line for stream, line in self.lines if stream == name]


def make_ctx(**overrides: Any) -> tuple[HandlerContext, Any]:
    sink = overrides.pop("log", None) or RecordingSink()
    values: dict[str, Any] = {
        "execution_id": "exec-1",
        "attempt": 1,
        "timeout_seconds": 20.0,
        "parameters": {"name": "world", "n": 3},
        "log": sink,
        "cancel_event": threading.Event(),
    }
    values.update(overrides)
    return HandlerContext(**values), sink


def shell(*argv: str, **extra: Any) -> dict[str, Any]:
    return {"type": "shell", "command": list(argv), **extra}


def assert_processes_gone(marker: str) -> None:
    # SIGKILL delivery and the pid namespace's teardown are asynchronous: wait, with a deadline.
    wait_until(
        lambda: not host_pids_running(marker),
        timeout=10,
        interval=0.05,
        message=f"the processes of `sleep {marker}` to be gone",
    )


def assert_group_gone(pgid: int) -> None:
    # Every member must be dead right away; orphaned zombies are reaped by init, on its own
    # schedule, after which the group id disappears entirely.
    assert live_group_members(pgid) == []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


@pytest.mark.needs_os_tool("bubblewrap")
def test_success_uses_json_object_on_last_stdout_line() -> None:
    ctx, sink = make_ctx()
    outcome = run_shell(
        shell("sh", "-c", "echo hello; echo '{\"early\": 1}'; echo '{\"answer\": 42}'; echo"), ctx
    )
    assert outcome.status == "success"
    assert outcome.exit_code == 0
    assert outcome.result == {"answer": 42}
    assert "hello" in sink.stream("stdout")
    assert any(line.startswith("running sh -c") for line in sink.stream("system"))


@pytest.mark.needs_os_tool("bubblewrap")
@pytest.mark.parametrize("last_line", ["plain text", "[1, 2, 3]", '"just a string"', "{broken"])
def test_result_falls_back_to_exit_code_when_last_line_is_not_an_object(last_line: str) -> None:
    ctx, _ = make_ctx()
    outcome = run_shell(shell("sh", "-c", f"echo '{{\"a\": 1}}'; echo '{last_line}'"), ctx)
    assert outcome.status == "success"
    assert outcome.result == {"exit_code": 0}


@pytest.mark.needs_os_tool("bubblewrap")
def test_non_zero_exit_is_a_transient_failure_with_last_stderr_line() -> None:
    ctx, sink = make_ctx()
    outcome = run_shell(
        shell("sh", "-c", "echo first >&2; echo 'disk on fire' >&2; echo out; exit 3"), ctx
    )
    assert outcome.status == "failed"
    assert outcome.exit_code == 3
    assert outcome.error_class == "exit_code"
    assert outcome.transient is True
    assert "3" in outcome.error_message
    assert "disk on fire" in outcome.error_message
    assert outcome.result == {"exit_code": 3}
    assert sink.stream("stderr") == ["first", "disk on fire"]


@pytest.mark.needs_os_tool("bubblewrap")
def test_killed_by_signal_reports_the_shell_style_exit_code_and_names_the_signal() -> None:
    # Inside the sandbox bwrap reports a command killed by signal n as 128 + n.
    ctx, _ = make_ctx()
    outcome = run_shell(shell("sh", "-c", "kill -9 $$"), ctx)
    assert outcome.status == "failed"
    assert outcome.exit_code == 128 + 9
    assert "SIGKILL" in outcome.error_message


def test_unsandboxed_killed_by_signal_reports_negative_exit_code() -> None:
    ctx, _ = make_ctx()
    outcome = run_shell(shell("sh", "-c", "kill -9 $$"), ctx, sandbox=UNSANDBOXED)
    assert outcome.status == "failed"
    assert outcome.exit_code == -9
    assert "SIGKILL" in outcome.error_message


@pytest.mark.needs_os_tool("bubblewrap")
def test_environment_is_clean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANDLER_TEST_LEAK", "must-not-leak")
    ctx, sink = make_ctx(attempt=2)
    outcome = run_shell(shell("env", environment={"MY_SETTING": "from-config"}), ctx)
    assert outcome.status == "success"
    env = dict(line.split("=", 1) for line in sink.stream("stdout"))
    assert "HANDLER_TEST_LEAK" not in env
    assert env["MY_SETTING"] == "from-config"
    assert env["PATH"] == SAFE_PATH
    assert json.loads(env["TASK_PARAMETERS"]) == {"name": "world", "n": 3}
    assert env["TASK_EXECUTION_ID"] == "exec-1"
    assert env["TASK_ATTEMPT"] == "2"
    assert "TASK_UPSTREAM_RESULTS_FILE" not in env
    assert set(env) <= {
        "MY_SETTING",
        "PATH",
        "TASK_PARAMETERS",
        "TASK_EXECUTION_ID",
        "TASK_ATTEMPT",
        "PWD",  # env(1) does not add it, but be tolerant of shells that export it
    }


@pytest.mark.needs_os_tool("bubblewrap")
def test_upstream_results_on_stdin_and_in_a_file() -> None:
    upstream = {"extract": {"rows": 10}, "other": [1, 2]}
    ctx, sink = make_ctx(upstream_results=upstream)
    outcome = run_shell(
        shell(
            "sh", "-c", 'cat; cat "$TASK_UPSTREAM_RESULTS_FILE"; echo "$TASK_UPSTREAM_RESULTS_FILE"'
        ),
        ctx,
    )
    assert outcome.status == "success"
    stdin_line, file_line, path = sink.stream("stdout")
    assert json.loads(stdin_line) == upstream
    assert json.loads(file_line) == upstream
    assert path.endswith("upstream_results.json")
    assert not os.path.exists(path)


@pytest.mark.needs_os_tool("bubblewrap")
def test_stdin_is_dev_null_without_upstream_results() -> None:
    ctx, sink = make_ctx(timeout_seconds=10)
    started = time.monotonic()
    outcome = run_shell(shell("sh", "-c", "cat; echo after-cat"), ctx)
    assert outcome.status == "success"
    assert time.monotonic() - started < 5
    assert sink.stream("stdout") == ["after-cat"]


@pytest.mark.needs_os_tool("bubblewrap")
def test_large_upstream_results_do_not_deadlock_a_command_that_ignores_stdin() -> None:
    ctx, _ = make_ctx(upstream_results={"blob": "x" * 500_000}, timeout_seconds=10)
    outcome = run_shell(shell("sh", "-c", "echo ignoring stdin"), ctx)
    assert outcome.status == "success"


@pytest.mark.needs_os_tool("bubblewrap")
def test_timeout_kills_the_whole_sandbox_including_grandchildren() -> None:
    ctx, sink = make_ctx(timeout_seconds=1)
    marker = unique_sleep_seconds()
    # The grandchild ignores SIGTERM; the sandbox's end takes it along all the same.
    script = f"(trap '' TERM; sleep {marker}) & sleep {marker} & wait"
    started = time.monotonic()
    outcome = run_shell(shell("sh", "-c", script), ctx, kill_grace_seconds=0.5)
    elapsed = time.monotonic() - started
    assert outcome.status == "timed_out"
    assert outcome.error_class == "timeout"
    assert outcome.transient is True
    assert outcome.exit_code is not None and outcome.exit_code != 0
    assert elapsed < 6
    assert_processes_gone(marker)
    system = " ".join(sink.stream("system"))
    assert "SIGTERM" in system


@pytest.mark.needs_os_tool("bubblewrap")
def test_timeout_sends_sigterm_to_the_task_first() -> None:
    ctx, sink = make_ctx(timeout_seconds=1)
    script = "trap 'echo got-term; exit 7' TERM; while :; do sleep 0.1; done"
    outcome = run_shell(shell("sh", "-c", script), ctx, kill_grace_seconds=5)
    assert outcome.status == "timed_out"
    assert sink.stream("stdout") == ["got-term"]
    assert outcome.exit_code == 7


def test_unsandboxed_timeout_kills_the_whole_process_group_including_grandchildren() -> None:
    ctx, sink = make_ctx(timeout_seconds=1)
    script = "echo $$; (trap '' TERM; sleep 100) & sleep 100 & wait"
    outcome = run_shell(shell("sh", "-c", script), ctx, kill_grace_seconds=0.5, sandbox=UNSANDBOXED)
    assert outcome.status == "timed_out"
    assert outcome.exit_code is not None and outcome.exit_code < 0
    assert_group_gone(int(sink.stream("stdout")[0]))


@pytest.mark.needs_os_tool("bubblewrap")
def test_timeout_escalates_to_sigkill_for_a_leader_ignoring_sigterm() -> None:
    ctx, sink = make_ctx(timeout_seconds=0.5)
    marker = unique_sleep_seconds()
    script = f"trap '' TERM; sleep {marker} & while :; do sleep 0.1; done"
    started = time.monotonic()
    outcome = run_shell(shell("sh", "-c", script), ctx, kill_grace_seconds=0.5)
    assert outcome.status == "timed_out"
    assert outcome.exit_code == -9  # the sandbox itself (bwrap) was killed
    assert time.monotonic() - started < 5
    assert "SIGKILL" in " ".join(sink.stream("system"))
    assert_processes_gone(marker)


@pytest.mark.needs_os_tool("bubblewrap")
def test_background_children_left_behind_are_killed_and_do_not_hang_the_worker() -> None:
    ctx, _ = make_ctx(timeout_seconds=30)
    marker = unique_sleep_seconds()
    started = time.monotonic()
    outcome = run_shell(shell("sh", "-c", f"sleep {marker} & echo started"), ctx)
    assert outcome.status == "success"
    assert time.monotonic() - started < 5
    assert_processes_gone(marker)


@pytest.mark.needs_os_tool("bubblewrap")
def test_cancel_event_kills_the_group_quickly() -> None:
    ctx, _ = make_ctx(timeout_seconds=60)
    timer = threading.Timer(0.5, ctx.cancel_event.set)
    timer.start()
    marker = unique_sleep_seconds()
    started = time.monotonic()
    try:
        outcome = run_shell(shell("sh", "-c", f"sleep {marker} & sleep {marker}"), ctx)
    finally:
        timer.cancel()
    elapsed = time.monotonic() - started
    assert outcome.status == "cancelled"
    assert outcome.error_class == "cancelled"
    assert outcome.transient is False
    assert elapsed < 0.5 + 2
    assert_processes_gone(marker)


def test_cancel_before_start_runs_nothing(tmp_path: Any) -> None:
    ctx, _ = make_ctx()
    ctx.cancel_event.set()
    marker = tmp_path / "ran"
    outcome = run_shell(shell("touch", str(marker)), ctx)
    assert outcome.status == "cancelled"
    assert not marker.exists()


@pytest.mark.needs_os_tool("bubblewrap")
def test_twenty_megabytes_of_output_keep_memory_bounded() -> None:
    sink = BufferedLogSink(max_bytes=1024 * 1024)
    ctx, _ = make_ctx(log=sink)
    # ~20 MB in 100-byte lines.
    script = f"yes {'0123456789' * 10} | head -c 20000000"
    tracemalloc.start()
    try:
        outcome = run_shell(shell("sh", "-c", script), ctx)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert outcome.status == "success"
    assert peak < 8 * 1024 * 1024, f"peak traced memory {peak} bytes"
    assert sink.truncated
    assert sink.kept_bytes <= 1024 * 1024
    assert sink.dropped_bytes > 18_000_000
    markers = [line for line in sink.lines if line.text.startswith("[log truncated after")]
    assert len(markers) == 1
    assert sink.lines[-1].text == markers[0].text
    assert f"[log truncated after {sink.kept_bytes} bytes]" in sink.text()


@pytest.mark.needs_os_tool("bubblewrap")
def test_a_single_huge_line_is_cut_and_memory_stays_bounded() -> None:
    ctx, sink = make_ctx()
    tracemalloc.start()
    try:
        outcome = run_shell(shell("sh", "-c", "head -c 20000000 /dev/zero | tr '\\0' a"), ctx)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert outcome.status == "success"
    assert outcome.result == {"exit_code": 0}
    assert peak < 8 * 1024 * 1024, f"peak traced memory {peak} bytes"
    (line,) = sink.stream("stdout")
    assert line.startswith("a" * MAX_LOG_LINE_BYTES)
    assert line.endswith("[line truncated: 20000000 bytes]")


@pytest.mark.needs_os_tool("bubblewrap")
def test_secrets_are_masked_in_logs_errors_and_results() -> None:
    secret = "s3cr3t-T0ken"
    ctx, sink = make_ctx(secrets_to_mask=(secret,))
    script = (
        'echo "token=$API_TOKEN"; echo "bad $API_TOKEN" >&2; '
        'echo "{\\"token\\": \\"$API_TOKEN\\"}"; exit 1'
    )
    outcome = run_shell(shell("sh", "-c", script, environment={"API_TOKEN": secret}), ctx)
    assert outcome.status == "failed"
    everything = json.dumps(sink.lines) + outcome.error_message + json.dumps(outcome.result)
    assert secret not in everything
    assert "token=****" in sink.stream("stdout")
    assert "bad ****" in outcome.error_message
    assert outcome.result == {"token": "****"}


def test_secret_in_argv_is_masked_in_the_system_log_line() -> None:
    secret = "hunter2-hunter2"
    ctx, sink = make_ctx(secrets_to_mask=(secret,))
    run_shell(shell("echo", secret), ctx)
    assert secret not in json.dumps(sink.lines)


@pytest.mark.needs_os_tool("bubblewrap")
def test_file_size_limit_contains_a_disk_hog() -> None:
    ctx, sink = make_ctx()
    script = "dd if=/dev/zero of=big bs=1M count=10 2>/dev/null; echo dd=$?; wc -c < big"
    outcome = run_shell(
        shell("sh", "-c", script, resource_requirements={"file_size_bytes": 1_000_000}), ctx
    )
    assert outcome.status == "success"
    stdout = sink.stream("stdout")
    assert stdout[0] != "dd=0"  # dd was stopped (SIGXFSZ)
    assert int(stdout[1]) == 1_000_000


@pytest.mark.needs_os_tool("bubblewrap")
def test_memory_limit_contains_a_memory_hog() -> None:
    ctx, sink = make_ctx()
    hog = "x = bytearray(1024 * 1024 * 1024); print('allocated')"
    outcome = run_shell(
        shell("python3", "-c", hog, resource_requirements={"memory_bytes": 300 * 1024**2}),
        ctx,
    )
    assert outcome.status == "failed"
    assert "MemoryError" in " ".join(sink.stream("stderr"))
    assert "allocated" not in sink.stream("stdout")


@pytest.mark.needs_os_tool("bubblewrap")
def test_default_and_explicit_limits_are_applied_in_the_child() -> None:
    ctx, sink = make_ctx()
    outcome = run_shell(shell("sh", "-c", "ulimit -n; ulimit -c"), ctx)
    assert outcome.status == "success"
    open_files, core = sink.stream("stdout")
    assert int(open_files) <= DEFAULT_LIMITS["open_files"]
    assert core == "0"

    ctx, sink = make_ctx()
    run_shell(shell("sh", "-c", "ulimit -n", resource_requirements={"open_files": 64}), ctx)
    assert sink.stream("stdout") == ["64"]


@pytest.mark.needs_os_tool("bubblewrap")
def test_limits_set_through_the_start_gate_apply_before_the_command_starts() -> None:
    """The path of a worker that is not root (the image's): no prlimit exec, the worker sets
    the limits on the sandbox's init while it waits at the gate. Run here as the worker's
    own user whatever that is, so it is tested under root as well."""
    import resource

    import psutil

    from sandbox.argv import sandboxed_argv
    from sandbox.files import SandboxFiles
    from sandbox.gate import StartGate
    from sandbox.profile import NETWORK_NONE
    from sandbox.rlimits import resolve_limits, set_limits
    from sandbox.spawn import launch

    limits = resolve_limits({"open_files": 64, "processes": 50, "cpu_seconds": 7})
    script = "ulimit -n; ulimit -c; ulimit -t; grep 'Max processes' /proc/self/limits"
    with SandboxFiles(network=NETWORK_NONE, upstream=None) as files:
        gate = StartGate()
        argv = sandboxed_argv(["sh", "-c", script], limits=limits, files=files, gate=gate)
        assert not any("prlimit" in part for part in argv)
        launched = launch(
            argv,
            env={"PATH": SAFE_PATH},
            stdin_piped=False,
            pass_fds=(*files.fds(), *gate.fds_for_bwrap()),
            sandboxed=True,
        )
    try:
        init = gate.sandbox_pid()
        # The sandbox waits at the gate: its init has not started the command.
        assert psutil.Process(init).children() == []
        set_limits(init, limits)
        assert resource.prlimit(init, resource.RLIMIT_NOFILE) == (64, 64)
        gate.release()
        out, _err = launched.proc.communicate(timeout=30)
    finally:
        gate.close()
        launched.kill()
        launched.close()
    assert launched.proc.returncode == 0
    lines = out.decode().splitlines()
    assert lines[:3] == ["64", "0", "7"]
    assert lines[3].split()[2:4] == ["50", "50"]  # Max processes: soft, hard


@pytest.mark.needs_os_tool("bubblewrap")
def test_a_sandbox_whose_gate_fails_is_killed_before_its_command_runs() -> None:
    """Limits that cannot be set (a hard limit above the worker's own): the run fails and
    the command never ran (it would have printed)."""
    import resource

    from sandbox.argv import sandboxed_argv
    from sandbox.files import SandboxFiles
    from sandbox.gate import StartGate
    from sandbox.profile import NETWORK_NONE
    from sandbox.spawn import launch
    from workers.handlers.shell_sandboxed import open_gate

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    too_high = [(resource.RLIMIT_NOFILE, hard + 1, hard + 1)]
    with SandboxFiles(network=NETWORK_NONE, upstream=None) as files:
        gate = StartGate()
        argv = sandboxed_argv(["sh", "-c", "echo ran"], limits=too_high, files=files, gate=gate)
        launched = launch(
            argv,
            env={"PATH": SAFE_PATH},
            stdin_piped=False,
            pass_fds=(*files.fds(), *gate.fds_for_bwrap()),
            sandboxed=True,
        )
    assert launched.proc.stdout is not None
    stdout = os.dup(launched.proc.stdout.fileno())  # open_gate closes the handler's copy
    try:
        outcome = open_gate(launched, gate, too_high)
        assert outcome is not None and outcome.error_class == "spawn_failed"
        assert launched.proc.returncode is not None  # bwrap is dead and reaped
        with os.fdopen(stdout, "rb", closefd=False) as pipe:
            assert pipe.read() == b""  # every writer gone, and nothing was written
    finally:
        os.close(stdout)


_DIES_AT_THE_GATE = """
import os, subprocess, sys
from sandbox.argv import sandboxed_argv
from sandbox.files import SandboxFiles
from sandbox.gate import StartGate
from sandbox.profile import NETWORK_NONE
with SandboxFiles(network=NETWORK_NONE, upstream=None) as files:
    gate = StartGate()
    argv = sandboxed_argv(["sh", "-c", "echo ran"], limits=[], files=files, gate=gate)
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    subprocess.Popen(argv, pass_fds=(*files.fds(), *gate.fds_for_bwrap()), **quiet)
    print(gate.sandbox_pid(), flush=True)
os._exit(1)  # the worker dies at the gate: no limits set, no byte written
"""


@pytest.mark.needs_os_tool("bubblewrap")
def test_a_worker_that_dies_at_the_gate_leaves_no_command_running() -> None:
    import psutil

    helper = subprocess.run(
        [sys.executable, "-c", _DIES_AT_THE_GATE],
        capture_output=True,
        timeout=30,
        check=False,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    init = psutil.Process(int(helper.stdout.decode().strip()))
    try:
        # The sandbox's init outlived bwrap and its worker, asleep at the gate (it holds a
        # writer of the gate's pipe itself: no end-of-file), and never started the command.
        assert init.is_running() and init.status() != psutil.STATUS_ZOMBIE
        assert init.children() == []
    finally:
        init.kill()


def test_unsandboxed_child_has_parent_death_signal_set() -> None:
    ctx, _ = make_ctx()
    probe = (
        "import ctypes, json; v = ctypes.c_int(); "
        "ctypes.CDLL(None).prctl(2, ctypes.byref(v), 0, 0, 0); "
        "print(json.dumps({'pdeathsig': v.value}))"
    )
    outcome = run_shell(shell(sys.executable, "-c", probe), ctx, sandbox=UNSANDBOXED)
    assert outcome.status == "success"
    assert outcome.result == {"pdeathsig": 9}


WORKER_SCRIPT = """
import sys, threading
from handler_contract.base import HandlerContext
from sandbox.options import ShellSandbox
from workers.handlers.shell import run_shell

class PrintSink:
    def write(self, stream, line):
        print(stream, line, flush=True)

ctx = HandlerContext(
    execution_id="e", attempt=1, timeout_seconds=60, parameters={},
    log=PrintSink(), cancel_event=threading.Event(),
)
mode, marker = sys.argv[1], sys.argv[2]
run_shell(
    {"command": ["sh", "-c", f"sleep {marker} & echo started; exec sleep {marker}"]},
    ctx,
    sandbox=ShellSandbox(mode=mode),
)
"""


def _start_worker_and_kill_it(tmp_path: Any, mode: str, marker: str) -> None:
    repo_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER_SCRIPT, mode, marker],
        stdout=subprocess.PIPE,
        text=True,
        # The killed worker cannot remove its working directory; keep it in tmp_path.
        env={**os.environ, "PYTHONPATH": repo_root, "TMPDIR": str(tmp_path)},
    )
    try:
        assert worker.stdout is not None
        for line in worker.stdout:
            if line.startswith("stdout started"):
                break
        deadline = time.monotonic() + 10
        while len(host_pids_running(marker)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(host_pids_running(marker)) == 2
        worker.kill()  # SIGKILL: the worker gets no chance to clean up
        worker.wait()
        assert_processes_gone(marker)
    finally:
        worker.kill()
        worker.wait()


@pytest.mark.needs_os_tool("bubblewrap")
def test_the_sandbox_dies_with_the_worker(tmp_path: Any) -> None:
    _start_worker_and_kill_it(tmp_path, "on", unique_sleep_seconds())
    # Nothing of a sandboxed run is on the worker's disk.
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(WORKDIR_PREFIX)]


def test_unsandboxed_command_dies_with_the_worker(tmp_path: Any) -> None:
    marker = unique_sleep_seconds()
    repo_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER_SCRIPT, "off", marker],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": repo_root, "TMPDIR": str(tmp_path)},
    )
    try:
        assert worker.stdout is not None
        for line in worker.stdout:
            if line.startswith("stdout started"):
                break
        # Both sleeps up first: the background one may not have exec'd yet when the echo is
        # read (it then counted as neither, and the wait below ended at once).
        deadline = time.monotonic() + 10
        while len(host_pids_running(marker)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(host_pids_running(marker)) == 2
        worker.kill()
        worker.wait()
        # Only the direct child has the parent-death signal: the background sleep, a
        # grandchild, outlives the worker unsandboxed (one reason the sandbox exists).
        deadline = time.monotonic() + 5
        while len(host_pids_running(marker)) > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(host_pids_running(marker)) == 1
    finally:
        worker.kill()
        worker.wait()
        for pid in host_pids_running(marker):
            os.kill(pid, 9)

    # The sweep a worker runs at start-up removes what the killed one left behind.
    (leftover,) = [p for p in tmp_path.iterdir() if p.name.startswith(WORKDIR_PREFIX)]
    assert remove_stale_workdirs(3600, root=str(tmp_path)) == 0  # too recent to touch
    os.utime(leftover, (time.time() - 7200, time.time() - 7200))
    assert remove_stale_workdirs(3600, root=str(tmp_path)) == 1
    assert not leftover.exists()


@pytest.mark.needs_os_tool("bubblewrap")
def test_runs_in_a_private_work_directory_with_nothing_left_on_the_host() -> None:
    ctx, sink = make_ctx()
    script = (
        "pwd; touch file; mkdir -p locked/inner; touch locked/inner/f; chmod 0 locked/inner locked"
    )
    outcome = run_shell(shell("sh", "-c", script), ctx)
    assert outcome.status == "success"
    assert sink.stream("stdout") == ["/task"]


def test_each_run_starts_with_an_empty_work_directory_and_tmp() -> None:
    ctx1, _ = make_ctx()
    ctx2, sink2 = make_ctx()
    run_shell(shell("sh", "-c", "touch left-behind /tmp/left-behind"), ctx1)
    run_shell(shell("sh", "-c", "ls -A . /tmp"), ctx2)
    assert "left-behind" not in " ".join(sink2.stream("stdout"))


def test_unsandboxed_runs_in_a_fresh_working_directory_that_is_removed() -> None:
    ctx, sink = make_ctx()
    script = (
        "pwd; touch file; mkdir -p locked/inner; touch locked/inner/f; chmod 0 locked/inner locked"
    )
    outcome = run_shell(shell("sh", "-c", script), ctx, sandbox=UNSANDBOXED)
    assert outcome.status == "success"
    (workdir,) = sink.stream("stdout")
    assert os.path.isabs(workdir)
    assert workdir != os.getcwd()
    assert not os.path.exists(workdir)


@pytest.mark.needs_os_tool("bubblewrap")
def test_command_not_found_is_permanent() -> None:
    ctx, _ = make_ctx()
    outcome = run_shell(shell("definitely-not-a-real-command-4711"), ctx)
    assert outcome.status == "failed"
    assert outcome.error_class == "command_not_found"
    assert outcome.transient is False
    assert "definitely-not-a-real-command-4711" in outcome.error_message


@pytest.mark.needs_os_tool("bubblewrap")
def test_command_string_is_never_run_through_a_shell(tmp_path: Any) -> None:
    marker = tmp_path / "pwned"
    ctx, _ = make_ctx()
    outcome = run_shell(shell("echo", f"hi; touch {marker}"), ctx)
    assert outcome.status == "success"
    assert not marker.exists()


@pytest.mark.needs_os_tool("bubblewrap")
def test_dispatcher_runs_shell_and_rejects_bad_config() -> None:
    ctx, _ = make_ctx()
    ok = run_handler({"type": "shell", "command": ["sh", "-c", "echo '{\"ok\": true}'"]}, ctx)
    assert ok.status == "success"
    assert ok.result == {"ok": True}

    bad = run_handler({"type": "shell", "command": "echo hi"}, ctx)
    assert bad.status == "failed"
    assert bad.error_class == "invalid_config"
    assert bad.transient is False
    assert "handler.command" in bad.error_message


def test_without_bubblewrap_shell_runs_fail_permanently_and_nothing_runs(tmp_path: Any) -> None:
    marker = tmp_path / "ran-unsandboxed"
    ctx, _ = make_ctx()
    outcome = run_shell(
        shell("touch", str(marker)), ctx, sandbox=ShellSandbox(bwrap="/nonexistent/bwrap")
    )
    assert (outcome.status, outcome.error_class, outcome.transient) == (
        "failed",
        "sandbox_unavailable",
        False,
    )
    assert "WORKER_SHELL_SANDBOX=off" in outcome.error_message
    assert not marker.exists()  # no silent fallback to an unsandboxed run


def test_egress_is_refused_unless_the_tenant_is_allowed_it() -> None:
    ctx, sink = make_ctx()
    outcome = run_shell(shell("echo", "ran", network="egress"), ctx)
    assert (outcome.status, outcome.error_class, outcome.transient) == (
        "failed",
        "egress_not_allowed",
        False,
    )
    assert sink.stream("stdout") == []


@pytest.mark.needs_os_tool("bubblewrap")
def test_without_network_no_socket_but_unix_can_be_created() -> None:
    probe = (
        "import errno, socket\n"
        "for family in (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK, socket.AF_PACKET):\n"
        "    try:\n"
        "        socket.socket(family, socket.SOCK_DGRAM)\n"
        "        print('created', family)\n"
        "    except OSError as error:\n"
        "        print('refused', errno.errorcode[error.errno])\n"
        "a, b = socket.socketpair(); a.send(b'x'); print('unix', b.recv(1).decode())\n"
    )
    ctx, sink = make_ctx()
    outcome = run_shell(shell("python3", "-c", probe), ctx)
    assert outcome.status == "success", outcome.error_message
    assert sink.stream("stdout") == ["refused EAFNOSUPPORT"] * 4 + ["unix x"]


@pytest.mark.needs_os_tool("bubblewrap", "slirp4netns")
def test_egress_gives_the_sandbox_a_network_without_the_hosts_loopback() -> None:
    probe = (
        "import socket\n"
        "for host, port in (('10.0.2.2', 6379), ('10.0.2.2', 5432)):\n"
        "    try:\n"
        "        socket.create_connection((host, port), timeout=3); print('CONNECTED')\n"
        "    except OSError as error:\n"
        "        print('failed', error.errno)\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('10.0.2.3', 53))\n"
        "print('address', s.getsockname()[0])\n"
    )
    ctx, sink = make_ctx()
    outcome = run_shell(
        shell("python3", "-c", probe, network="egress"),
        ctx,
        sandbox=ShellSandbox(egress_allowed=True),
    )
    assert outcome.status == "success", outcome.error_message
    out = sink.stream("stdout")
    assert out[-1] == "address 10.0.2.100"
    # EHOSTUNREACH: the gateway (the host's loopback, disabled in slirp4netns too) has an
    # unreachable route in the sandbox (sandbox/egress_filter.py).
    assert out[:2] == ["failed 113", "failed 113"]


@pytest.mark.needs_os_tool("bubblewrap", "slirp4netns")
def test_egress_sandboxes_started_together_all_get_their_network() -> None:
    """bwrap reports the sandbox before it has set up the namespace's loopback; slirp4netns
    attached at once raced it and bwrap died ("loopback: Failed RTM_NEWADDR") in about one
    start in twenty under load, as seen in CI. Forty starts, four at a time."""
    from concurrent.futures import ThreadPoolExecutor

    def start(_: int) -> tuple[str, str]:
        ctx, _sink = make_ctx()
        outcome = run_shell(
            shell("true", network="egress"), ctx, sandbox=ShellSandbox(egress_allowed=True)
        )
        return outcome.status, outcome.error_message or ""

    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(start, range(40)))
    assert [o for o in outcomes if o[0] != "success"] == []
