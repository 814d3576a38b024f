"""Shell handler: run one argv in a bubblewrap sandbox (or, if the operator says so, without).

Design notes:

* The command is an argv list and is never given to a shell; a task that wants shell syntax
  has to say ``["sh", "-c", ...]`` itself, so the choice is visible in its config.
* The child gets a clean environment: the configured variables, a minimal ``PATH`` and the
  ``TASK_*`` variables. Nothing leaks from the worker's own environment (credentials!).
* Sandboxed (the default, ``sandbox.py`` has the profile): the command sees its own
  namespaces, a read-only system, an empty private ``/task`` work directory and ``/tmp`` in
  memory, and no network. It is started by a chain of small programs without a pre-exec hook
  (``spawn.py``), so starting it costs what bwrap costs. Timeout and cancel end the whole
  sandbox at once (its pid namespace dies with bwrap); nothing is left to remove afterwards.
* Unsandboxed (``WORKER_SHELL_SANDBOX=off``, and the container runtime's CLI): the old path,
  a fresh directory under the temp dir, ``start_new_session=True`` so one ``killpg`` reaches
  the tree, and a pre-exec hook for the rlimits and ``PR_SET_PDEATHSIG``. The hook runs
  between fork and exec of a possibly multi-threaded worker, so it only uses values computed
  beforehand and makes plain system calls (no imports, no logging).
* stdout and stderr are read with one ``selectors`` loop on non-blocking pipes, which also
  watches a pidfd of the child: no reader threads, no deadlock on large output, no sleep
  polls to notice the exit. Lines go straight to the log sink (``_LineSplitter.emit_line``);
  only a bounded head of each line and the last stdout line (for the JSON result) are held.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import pwd
import resource
import selectors
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from handler_contract.base import (
    STATUS_CANCELLED,
    STATUS_FAILED,
    STATUS_SUCCESS,
    STATUS_TIMED_OUT,
    HandlerContext,
    HandlerOutcome,
    LogSink,
    SecretMasker,
    clip,
    loads_strict,
    mask_outcome,
    masking_sink,
)
from handler_contract.validation import rlimit_requirements

from .egress import EgressNetwork, EgressSetupError
from .egress_filter import EgressPolicy
from .progress_lines import progress_line_taker
from .sandbox import (
    DEFAULT_BWRAP,
    DEFAULT_SCRATCH_BYTES,
    MODE_OFF,
    MODE_ON,
    NETWORK_EGRESS,
    NETWORK_MODES,
    NETWORK_NONE,
    SANDBOX_WORKDIR,
    SandboxFiles,
    probe_bubblewrap,
)
from .spawn import (
    Launched,
    SandboxStartError,
    StartGate,
    gate_sets_limits,
    launch,
    sandboxed_argv,
    set_limits,
)

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
UPSTREAM_RESULTS_FILE_NAME = "upstream_results.json"
WORKDIR_PREFIX = "task-run-"

# Longer lines are cut in the log; the full line is never held in memory.
MAX_LOG_LINE_BYTES = 16 * 1024
# The last stdout line is kept up to this size so it can be parsed as the JSON result.
MAX_RESULT_LINE_BYTES = 1024 * 1024
# How much of the last stderr line goes into error_message.
MAX_STDERR_TAIL_CHARS = 1000
READ_CHUNK_BYTES = 64 * 1024
# Upper bound on how late cancellation and timeouts are noticed.
POLL_INTERVAL_SECONDS = 0.05
# After the process group is dead, how long to wait for EOF from processes that escaped it.
DRAIN_SECONDS = 2.0
# How long to wait for SIGKILLed group members to actually disappear.
GROUP_EXIT_WAIT_SECONDS = 2.0

RLIMIT_BY_KEY: dict[str, int] = {
    "cpu_seconds": resource.RLIMIT_CPU,
    "memory_bytes": resource.RLIMIT_AS,
    "open_files": resource.RLIMIT_NOFILE,
    "processes": resource.RLIMIT_NPROC,
    "file_size_bytes": resource.RLIMIT_FSIZE,
}

# Guard rails applied to every run unless resource_requirements says otherwise. They only
# lower the *soft* limit (never below what the worker already has), so a command that really
# needs more can raise it again; explicit requirements set soft and hard limits. Memory and
# CPU get no default: address-space limits break JVM/Go runtimes and the timeout already
# bounds CPU time.
DEFAULT_LIMITS: dict[str, int] = {
    "open_files": 4096,
    "file_size_bytes": 16 * 1024**3,
    # Caps a fork bomb for an unprivileged worker user (root ignores RLIMIT_NPROC: run
    # shell tasks as another user with WORKER_SHELL_RUN_AS_USER to get it enforced).
    "processes": 4096,
}

# A root worker runs sandboxed tasks as this user unless WORKER_SHELL_RUN_AS_USER names one.
ROOT_WORKER_RUN_AS = "nobody"
# Selector tags besides the output splitters.
_STDIN = "stdin"
_EXITED = "exited"

_PR_SET_PDEATHSIG = 1
_SIGKILL = int(signal.SIGKILL)
_TRANSIENT_SPAWN_ERRNOS = frozenset({errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE})


def _load_prctl() -> Callable[..., int] | None:
    # Resolved once at import: the pre-exec hook must not load libraries after fork.
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


_prctl = _load_prctl()


def resolve_limits(requirements: Mapping[str, int] | None) -> list[tuple[int, int, int]]:
    """Turn resource_requirements into ``(resource, soft, hard)`` triples for the child.

    Never raises a limit above the worker's own hard limit: that would need privileges and
    the point is to constrain the task, not to escape the worker's own constraints.
    """
    requirements = requirements or {}
    unknown = set(requirements) - set(RLIMIT_BY_KEY)
    if unknown:
        raise ValueError(f"unknown resource requirement(s): {', '.join(sorted(unknown))}")
    # Core dumps of crashing tasks would fill the disk (or a crash collector) for nothing.
    limits: list[tuple[int, int, int]] = [(resource.RLIMIT_CORE, 0, 0)]
    for key, res in RLIMIT_BY_KEY.items():
        soft_now, hard_now = resource.getrlimit(res)
        if key in requirements:
            value = int(requirements[key])
            if hard_now != resource.RLIM_INFINITY:
                value = min(value, hard_now)
            hard = value
            if res == resource.RLIMIT_CPU:
                # One second between SIGXCPU (soft) and SIGKILL (hard) lets a task notice.
                hard = value + 1 if hard_now == resource.RLIM_INFINITY else min(value + 1, hard_now)
            limits.append((res, value, hard))
        elif key in DEFAULT_LIMITS:
            value = DEFAULT_LIMITS[key]
            if soft_now == resource.RLIM_INFINITY or value < soft_now:
                limits.append((res, value, hard_now))
    return limits


def _make_preexec(
    limits: Sequence[tuple[int, int, int]],
    parent_pid: int,
    identity: tuple[int, int] | None = None,
) -> Callable[[], None]:
    prctl = _prctl
    limit_list = tuple(limits)

    def in_child() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
            # The worker may have died between fork and prctl; then nobody would kill us.
            if os.getppid() != parent_pid:
                os._exit(125)
        for res, soft, hard in limit_list:
            resource.setrlimit(res, (soft, hard))
        if identity is not None:
            # Last: dropping root first would forbid raising nothing, but lowering hard
            # limits is allowed either way; after this the task cannot regain root.
            uid, gid = identity
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)

    return in_child


def resolve_identity(run_as: str | None) -> tuple[int, int] | None:
    """(uid, gid) to run a shell task as, or None to run it as the worker. Only root can
    switch users; an unprivileged worker already runs tasks unprivileged."""
    if not run_as or os.geteuid() != 0:
        return None

    entry = pwd.getpwnam(run_as)
    return entry.pw_uid, entry.pw_gid


def build_environment(
    config_env: Mapping[str, str] | None,
    ctx: HandlerContext,
    upstream_results_path: str | None = None,
) -> dict[str, str]:
    env = {"PATH": SAFE_PATH}
    env.update(config_env or {})
    env["TASK_PARAMETERS"] = json.dumps(ctx.parameters, sort_keys=True, default=str)
    env["TASK_EXECUTION_ID"] = str(ctx.execution_id)
    env["TASK_ATTEMPT"] = str(ctx.attempt)
    if upstream_results_path is not None:
        env["TASK_UPSTREAM_RESULTS_FILE"] = upstream_results_path
    return env


class _LineSplitter:
    """Splits a byte stream into lines for the log without ever holding a whole long line."""

    def __init__(
        self,
        stream: str,
        sink: LogSink,
        secrets: Sequence[str],
        *,
        keep_last_line: bool,
        take_line: Callable[[str], bool] | None = None,
    ) -> None:
        self.stream = stream
        # Sees each line first: True when it took the line (a progress report), not logged.
        self._take_line = take_line
        self._sink = sink
        self._masker = SecretMasker(secrets)
        # Keep a little more than we show so a secret straddling the cut is still masked.
        self._head_cap = MAX_LOG_LINE_BYTES + self._masker.longest_bytes
        self._keep_last_line = keep_last_line
        self._head = bytearray()
        self._size = 0
        self._pending = False
        self._body = bytearray()
        self._body_overflow = False
        # Last non-empty line: raw bytes (None if it was too long) and its masked log text.
        self.last_line: bytes | None = None
        self.last_text = ""

    def feed(self, data: bytes) -> None:
        pieces = data.split(b"\n")
        for piece in pieces[:-1]:
            self._append(piece)
            self._end_line()
        self._append(pieces[-1])

    def finish(self) -> None:
        if self._pending:
            self._end_line()

    def _append(self, piece: bytes) -> None:
        if not piece:
            return
        self._pending = True
        self._size += len(piece)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += piece[:room]
        if self._keep_last_line and not self._body_overflow:
            if len(self._body) + len(piece) > MAX_RESULT_LINE_BYTES:
                self._body_overflow = True
                self._body = bytearray()
            else:
                self._body += piece

    def _end_line(self) -> None:
        # NUL cannot be stored in a PostgreSQL text column (a task printing /proc/*/environ
        # would otherwise make its own run unrecordable); it is shown as U+FFFD.
        text = self._head.decode("utf-8", "replace").replace("\x00", "\ufffd")
        if text.endswith("\r") and self._size <= self._head_cap:
            text = text[:-1]
        text = self._masker.text(text)
        if self._size > MAX_LOG_LINE_BYTES:
            text = f"{text[:MAX_LOG_LINE_BYTES]} [line truncated: {self._size} bytes]"
        self.emit_line(text)
        self._head = bytearray()
        self._size = 0
        self._pending = False
        self._body = bytearray()
        self._body_overflow = False

    def emit_line(self, text: str) -> None:
        """Every complete line of the command's stdout or stderr passes here exactly once,
        already masked and cut to size: the one place to interpret a line (the log, the
        last line kept for the JSON result, a `::progress` report taken out of both)."""
        if self._take_line is not None and self._take_line(text):
            return  # taken: neither logged nor the result line
        self._sink.write(self.stream, text)
        if text.strip():
            self.last_text = clip(text, MAX_STDERR_TAIL_CHARS)
            if self._keep_last_line:
                self.last_line = None if self._body_overflow else bytes(self._body)


@dataclass(frozen=True)
class ShellSandbox:
    """How the worker runs shell tasks: the operator's mode and the tenant's egress right."""

    mode: str = MODE_ON
    egress_allowed: bool = False
    # This worker runs egress tasks at all (WORKER_SHELL_EGRESS): off on the workers that a
    # deployment keeps next to its data, whose queues never carry one.
    egress_offered: bool = True
    # What egress may not reach beyond the built-in list, and what it may (egress_filter).
    egress_policy: EgressPolicy = field(default_factory=EgressPolicy)
    scratch_bytes: int = DEFAULT_SCRATCH_BYTES
    bwrap: str = DEFAULT_BWRAP  # a name looked up in the system directories, or a path


def run_shell(
    config: dict[str, Any],
    ctx: HandlerContext,
    *,
    kill_grace_seconds: float = 5.0,
    run_as: str | None = None,
    sandbox: ShellSandbox | None = None,
) -> HandlerOutcome:
    """Run ``config["command"]`` (an argv list) once and report how it ended."""
    sandbox = sandbox or ShellSandbox()
    if ctx.cancel_event.is_set():
        return HandlerOutcome(
            status=STATUS_CANCELLED,
            error_class="cancelled",
            error_message="cancelled before start",
            transient=False,
        )
    command = config.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
        return _spawn_failure(
            "invalid_config", "handler.command must be a non-empty list of strings"
        )
    network = config.get("network", NETWORK_NONE)
    if network not in NETWORK_MODES:
        return _spawn_failure("invalid_config", f"handler.network must be one of {NETWORK_MODES}")
    if network == NETWORK_EGRESS and not sandbox.egress_allowed:
        return _spawn_failure(
            "egress_not_allowed",
            'handler.network: "egress" is not allowed for this tenant (ask the operator)',
        )
    if network == NETWORK_EGRESS and not sandbox.egress_offered:
        # Only a run that reached this worker by another way than its queue (its routing
        # sends it to `<tier>.egress`) gets here: it does not run next to the platform.
        return _spawn_failure(
            "egress_unavailable",
            "this worker does not run egress-enabled tasks (WORKER_SHELL_EGRESS=off); they "
            "run on the workers that consume the egress queues",
        )
    try:
        limits = resolve_limits(rlimit_requirements(config.get("resource_requirements")))
    except (ValueError, TypeError) as exc:
        return _spawn_failure("invalid_config", f"handler.resource_requirements: {exc}")
    if run_as is None and sandbox.mode == MODE_ON and os.geteuid() == 0:
        run_as = ROOT_WORKER_RUN_AS  # tenant code never starts from uid 0
    try:
        identity = resolve_identity(run_as)
    except KeyError:
        return _spawn_failure(
            "invalid_config", f"run-as user {run_as!r} does not exist on this worker"
        )
    kill_grace_seconds = max(0.0, kill_grace_seconds)
    if sandbox.mode == MODE_OFF:
        outcome = _run_unsandboxed(list(command), config, ctx, limits, kill_grace_seconds, identity)
    else:
        status = probe_bubblewrap(identity, sandbox.bwrap)
        if not status.available:
            return _spawn_failure(
                "sandbox_unavailable",
                f"shell tasks need the sandbox and this worker cannot provide it: "
                f"{status.detail} (the operator may set WORKER_SHELL_SANDBOX=off on a "
                "single-user machine)",
            )
        outcome = _run_sandboxed(
            list(command), network, ctx, sandbox, limits, kill_grace_seconds, identity, config
        )
    return mask_outcome(outcome, ctx.secrets_to_mask)


def _upstream_payload(ctx: HandlerContext) -> bytes | None:
    if ctx.upstream_results is None:
        return None
    return (json.dumps(ctx.upstream_results, default=str) + "\n").encode("utf-8")


def _run_sandboxed(
    command: list[str],
    network: str,
    ctx: HandlerContext,
    sandbox: ShellSandbox,
    limits: Sequence[tuple[int, int, int]],
    kill_grace_seconds: float,
    identity: tuple[int, int] | None,
    config: Mapping[str, Any],
) -> HandlerOutcome:
    log = masking_sink(ctx)
    stdin_data = _upstream_payload(ctx)
    upstream_path = (
        f"{SANDBOX_WORKDIR}/{UPSTREAM_RESULTS_FILE_NAME}" if stdin_data is not None else None
    )
    env = build_environment(config.get("environment"), ctx, upstream_path)
    log.write("system", f"running {shlex.join(command)} (sandboxed, network {network})")
    egress: EgressNetwork | None = None
    gate: StartGate | None = None
    try:
        with SandboxFiles(network=network, upstream=stdin_data) as files:
            if network == NETWORK_EGRESS:
                egress = EgressNetwork(sandbox.egress_policy)
            gate = StartGate()
            argv = sandboxed_argv(
                command,
                limits=limits,
                files=files,
                run_as=identity,
                scratch_bytes=sandbox.scratch_bytes,
                gate=gate,
                bwrap=sandbox.bwrap,
            )
            launched = launch(
                argv,
                env=env,
                stdin_piped=stdin_data is not None,
                pass_fds=(*files.fds(), *gate.fds_for_bwrap()),
                sandboxed=True,
            )
        launched.egress = egress
        egress = None
    except (OSError, EgressSetupError) as exc:
        if egress is not None:
            egress.close()
        if gate is not None:
            gate.close()
        outcome = _spawn_failure("spawn_failed", f"could not start the sandbox: {exc}")
        outcome.transient = isinstance(exc, OSError) and exc.errno in _TRANSIENT_SPAWN_ERRNOS
        return outcome
    failure = _open_gate(launched, gate, limits if gate_sets_limits(identity) else ())
    if failure is not None:
        return failure
    outcome = _Supervisor(launched, ctx, log, stdin_data, kill_grace_seconds).run()
    return _classify_sandbox_exec_failure(outcome, command, env)


def _open_gate(
    launched: Launched, gate: StartGate, limits: Sequence[tuple[int, int, int]]
) -> HandlerOutcome | None:
    """Between bwrap's report and the command's start: the rlimits on the sandbox's init
    (inherited by the command and all it starts), egress's network, then the go. On any
    failure the sandbox's init and bwrap are killed: no command runs unlimited."""
    try:
        pid = gate.sandbox_pid()
        set_limits(pid, limits)
        if launched.egress is not None:
            launched.egress.attach(pid)
        gate.release()
        return None
    except BaseException as exc:
        gate.kill()
        launched.kill()
        launched.proc.wait()
        gate.close()
        stderr = _stderr_tail(launched)
        launched.close()
        if not isinstance(exc, OSError | SandboxStartError | EgressSetupError):
            raise  # a bug, or the worker stopping: the sandbox is dead all the same
        if isinstance(exc, EgressSetupError):
            return HandlerOutcome(
                status=STATUS_FAILED,
                error_class="egress_failed",
                error_message=f"could not give the sandbox its network: {exc}",
                transient=True,
            )
        detail = f"{exc}: {stderr}" if stderr else str(exc)
        outcome = _spawn_failure("spawn_failed", clip(f"could not start the sandbox: {detail}"))
        outcome.transient = True
        return outcome
    finally:
        gate.close()


def _stderr_tail(launched: Launched) -> str:
    """The last line bwrap wrote on stderr (why it exited early), without blocking."""
    pipe = launched.proc.stderr
    if pipe is None:
        return ""
    try:
        os.set_blocking(pipe.fileno(), False)
        text = (pipe.read() or b"").decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    for stream in (launched.proc.stdin, launched.proc.stdout, pipe):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    return text.splitlines()[-1] if text else ""


def _classify_sandbox_exec_failure(
    outcome: HandlerOutcome, command: list[str], env: Mapping[str, str]
) -> HandlerOutcome:
    # bwrap reports a failed execvp on stderr and exits 1; tell it apart from the command's
    # own exit code 1 so a typo stays a permanent error, as without the sandbox.
    message = outcome.error_message
    if outcome.exit_code != 1 or "bwrap: execvp" not in message:
        return outcome
    if "No such file or directory" in message:
        return _spawn_failure(
            "command_not_found", f"command not found: {command[0]!r} (PATH={env['PATH']})"
        )
    if "Permission denied" in message:
        return _spawn_failure("command_not_executable", f"cannot execute {command[0]!r}")
    return outcome


def _run_unsandboxed(
    command: list[str],
    config: Mapping[str, Any],
    ctx: HandlerContext,
    limits: Sequence[tuple[int, int, int]],
    kill_grace_seconds: float,
    identity: tuple[int, int] | None,
) -> HandlerOutcome:
    workdir = tempfile.mkdtemp(prefix=WORKDIR_PREFIX)
    if identity is not None:
        os.chown(workdir, *identity)
    try:
        stdin_data = _upstream_payload(ctx)
        upstream_path: str | None = None
        if stdin_data is not None:
            upstream_path = os.path.join(workdir, UPSTREAM_RESULTS_FILE_NAME)
            with open(upstream_path, "wb") as fh:
                fh.write(stdin_data)
        env = build_environment(config.get("environment"), ctx, upstream_path)
        return run_process(
            command,
            env=env,
            ctx=ctx,
            limits=limits,
            kill_grace_seconds=kill_grace_seconds,
            identity=identity,
            stdin_data=stdin_data,
            cwd=workdir,
        )
    finally:
        remove_tree(workdir)


def run_process(
    command: list[str],
    *,
    env: Mapping[str, str],
    ctx: HandlerContext,
    limits: Sequence[tuple[int, int, int]],
    kill_grace_seconds: float,
    identity: tuple[int, int] | None = None,
    stdin_data: bytes | None = None,
    cwd: str | None = None,
    shown_command: str | None = None,
) -> HandlerOutcome:
    """Run an argv outside any sandbox in its own session, with rlimits; supervised the same
    way. For WORKER_SHELL_SANDBOX=off and for a container runtime's CLI (which the sandbox
    would cut off from its daemon). Not masked: callers mask their outcome."""
    log = masking_sink(ctx)
    log.write("system", f"running {shown_command or shlex.join(command)}")
    try:
        launched = launch(
            command,
            env=env,
            stdin_piped=stdin_data is not None,
            sandboxed=False,
            cwd=cwd,
            preexec_fn=_make_preexec(limits, os.getpid(), identity),
        )
    except FileNotFoundError:
        return _spawn_failure(
            "command_not_found", f"command not found: {command[0]!r} (PATH={env.get('PATH')})"
        )
    except PermissionError as exc:
        return _spawn_failure("command_not_executable", f"cannot execute {command[0]!r}: {exc}")
    except OSError as exc:
        outcome = _spawn_failure("spawn_failed", f"could not start {command[0]!r}: {exc}")
        outcome.transient = exc.errno in _TRANSIENT_SPAWN_ERRNOS
        return outcome
    except subprocess.SubprocessError as exc:
        return _spawn_failure("spawn_failed", f"could not prepare the child process: {exc}")
    return _Supervisor(launched, ctx, log, stdin_data, kill_grace_seconds).run()


def _spawn_failure(error_class: str, message: str) -> HandlerOutcome:
    return HandlerOutcome(
        status=STATUS_FAILED, error_class=error_class, error_message=message, transient=False
    )


class _Supervisor:
    """Pumps the child's pipes, notices its exit on a pidfd, enforces cancel and deadline."""

    def __init__(
        self,
        launched: Launched,
        ctx: HandlerContext,
        log: LogSink,
        stdin_data: bytes | None,
        kill_grace_seconds: float,
    ) -> None:
        self.launched = launched
        self.proc = launched.proc
        self.ctx = ctx
        self.log = log
        self.kill_grace_seconds = kill_grace_seconds
        secrets = [s for s in ctx.secrets_to_mask if s]
        # The splitters mask before cutting long lines, so they can write to the raw sink.
        self.stdout = _LineSplitter(
            "stdout", ctx.log, secrets, keep_last_line=True, take_line=progress_line_taker(ctx)
        )
        self.stderr = _LineSplitter("stderr", ctx.log, secrets, keep_last_line=False)
        self.selector = selectors.DefaultSelector()
        self._stdin_pending = memoryview(stdin_data) if stdin_data is not None else None
        self._reaped = False
        self._exited = False

    def run(self) -> HandlerOutcome:
        try:
            return self._run()
        finally:
            self._cleanup()

    def _run(self) -> HandlerOutcome:
        proc = self.proc
        if proc.stdout is None or proc.stderr is None:
            raise RuntimeError("Popen did not create the output pipes")
        for pipe, splitter in ((proc.stdout, self.stdout), (proc.stderr, self.stderr)):
            os.set_blocking(pipe.fileno(), False)
            self.selector.register(pipe.fileno(), selectors.EVENT_READ, splitter)
        if proc.stdin is not None:
            os.set_blocking(proc.stdin.fileno(), False)
            self.selector.register(proc.stdin.fileno(), selectors.EVENT_WRITE, _STDIN)
        if self.launched.pidfd is not None:
            # Readable once the child has exited: the select below wakes at once.
            self.selector.register(self.launched.pidfd, selectors.EVENT_READ, _EXITED)

        started = time.monotonic()
        timeout = float(self.ctx.timeout_seconds)
        deadline = started + timeout
        kill_at: float | None = None
        final_status: str | None = None

        while True:
            self._pump(POLL_INTERVAL_SECONDS)
            if self._leader_exited():
                break
            now = time.monotonic()
            if final_status is None and self.ctx.cancel_event.is_set():
                final_status = STATUS_CANCELLED
                self.log.write("system", "cancel requested: killing the sandbox")
                self.launched.kill()
            elif final_status is None and now >= deadline:
                final_status = STATUS_TIMED_OUT
                self.log.write(
                    "system", f"timed out after {timeout:g}s: sending SIGTERM to the task"
                )
                self.launched.terminate()
                kill_at = now + self.kill_grace_seconds
            elif kill_at is not None and (now >= kill_at or self.ctx.cancel_event.is_set()):
                self.log.write("system", "still running after SIGTERM: sending SIGKILL")
                self.launched.kill()
                kill_at = None

        if not self.launched.sandboxed:
            # The leader is a zombie, so its pid (== pgid) cannot be reused yet: kill whatever
            # it left behind in its group before reaping it.
            self.launched.kill()
        returncode = proc.wait()
        self._reaped = True
        if not self.launched.sandboxed:
            _wait_for_group_exit(proc.pid, GROUP_EXIT_WAIT_SECONDS)
        # Sandboxed: bwrap has exited, so has its init, and the kernel ends every process in
        # the pid namespace with it; their pipe ends close as they go.
        self._drain()
        elapsed = time.monotonic() - started

        if final_status == STATUS_CANCELLED:
            return HandlerOutcome(
                status=STATUS_CANCELLED,
                exit_code=returncode,
                error_class="cancelled",
                error_message=f"cancelled after {elapsed:.1f}s",
                transient=False,
            )
        if final_status == STATUS_TIMED_OUT:
            return HandlerOutcome(
                status=STATUS_TIMED_OUT,
                exit_code=returncode,
                error_class="timeout",
                error_message=f"timed out after {timeout:g}s ({self._describe(returncode)})",
                transient=True,
            )
        self.log.write("system", f"{self._describe(returncode)} after {elapsed:.1f}s")
        result = self._parse_result()
        if returncode == 0:
            return HandlerOutcome(
                status=STATUS_SUCCESS,
                exit_code=0,
                result=result if result is not None else {"exit_code": 0},
            )
        message = self._describe(returncode)
        if self.stderr.last_text:
            message = f"{message}: {self.stderr.last_text}"
        return HandlerOutcome(
            status=STATUS_FAILED,
            exit_code=returncode,
            result=result if result is not None else {"exit_code": returncode},
            error_class="exit_code",
            error_message=clip(message),
            transient=True,
        )

    def _describe(self, returncode: int) -> str:
        return _describe_exit(returncode, sandboxed=self.launched.sandboxed)

    def _pump(self, timeout: float) -> None:
        for key, _events in self.selector.select(timeout):
            if key.data is _EXITED:
                self._exited = True
                self.selector.unregister(key.fd)
                continue
            if key.data is _STDIN:
                self._write_stdin(key.fd)
                continue
            try:
                data = os.read(key.fd, READ_CHUNK_BYTES)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data:
                key.data.feed(data)
            else:
                key.data.finish()
                self.selector.unregister(key.fd)

    def _write_stdin(self, fd: int) -> None:
        pending = self._stdin_pending
        try:
            while pending:
                written = os.write(fd, pending)
                pending = pending[written:]
        except BlockingIOError:
            self._stdin_pending = pending
            return
        except OSError:
            # The command closed stdin or exited without reading it: its choice, not an error.
            pass
        self._stdin_pending = None
        self.selector.unregister(fd)
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()

    def _leader_exited(self) -> bool:
        if self.launched.pidfd is not None and not self._exited:
            return False
        try:
            # WNOWAIT leaves the leader a zombie so its pgid stays ours until we reap it.
            info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True  # someone else reaped it; Popen.wait() copes with that
        return info is not None

    def _drain(self) -> None:
        deadline = time.monotonic() + DRAIN_SECONDS
        while self._open_pipes() and time.monotonic() < deadline:
            self._pump(POLL_INTERVAL_SECONDS)
        for key in list(self.selector.get_map().values()):
            if isinstance(key.data, _LineSplitter):
                key.data.finish()
        if self._open_pipes():
            self.log.write(
                "system",
                "output pipes still open after the process group ended (a process escaped "
                "it with setsid?); stopped reading",
            )

    def _open_pipes(self) -> bool:
        return any(key.data is not _EXITED for key in self.selector.get_map().values())

    def _parse_result(self) -> dict[str, Any] | None:
        line = self.stdout.last_line
        if not line:
            return None
        try:
            value = loads_strict(line)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def _cleanup(self) -> None:
        if not self._reaped:
            self.launched.kill()
            with contextlib.suppress(OSError):
                self.proc.kill()
            self.proc.wait()
            self._reaped = True
        self.selector.close()
        self.launched.close()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def _wait_for_group_exit(pgid: int, timeout: float) -> bool:
    """Wait until every process in ``pgid`` is dead (SIGKILL delivery is asynchronous).

    Only called after the leader is reaped: a zombie leader would keep the group "alive".
    While any member exists the pgid cannot be reused, so probing it with signal 0 is safe.
    Orphaned members are reaped by init, which may take a while; a group holding only zombies
    counts as dead.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        time.sleep(0.02)
        if not live_group_members(pgid):
            return True
        if time.monotonic() >= deadline:
            return False


def live_group_members(pgid: int) -> list[int]:
    """PIDs of non-zombie processes in process group ``pgid`` (from /proc)."""
    members: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for entry in entries:
        if not (entry.isascii() and entry.isdigit()):
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may contain spaces and parentheses.
        fields = raw[raw.rfind(b")") + 1 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            members.append(int(entry))
    return members


def _describe_exit(returncode: int, *, sandboxed: bool = False) -> str:
    if returncode < 0:
        return f"killed by {_signal_name(-returncode)} (exit code {returncode})"
    if sandboxed and 128 < returncode <= 128 + 64:
        # bwrap reports a command killed by signal n as 128 + n, as shells do.
        return (
            f"exited with code {returncode} (killed by {_signal_name(returncode - 128)}, "
            "or exited with that code)"
        )
    return f"exited with code {returncode}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def remove_tree(path: str) -> None:
    """Remove a task's working directory even if the task left read-only directories."""
    try:
        shutil.rmtree(path)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    with contextlib.suppress(OSError):
        os.chmod(path, stat.S_IRWXU)
    for dirpath, dirnames, _filenames in os.walk(path):
        for name in dirnames:
            sub = os.path.join(dirpath, name)
            if not os.path.islink(sub):
                with contextlib.suppress(OSError):
                    os.chmod(sub, stat.S_IRWXU)
    shutil.rmtree(path, ignore_errors=True)


def remove_stale_workdirs(max_age_seconds: float, root: str | None = None) -> int:
    """Remove working directories left behind by killed workers; returns how many.

    A worker killed with SIGKILL cannot clean up after itself. Call this at worker start with
    an age well above the longest task timeout, so directories of runs still in progress
    (possibly another worker's, if they share the temp dir) are never touched.
    """
    root = root or tempfile.gettempdir()
    cutoff = time.time() - max_age_seconds
    removed = 0
    try:
        entries = list(os.scandir(root))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.startswith(WORKDIR_PREFIX):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat().st_mtime > cutoff:
                continue
        except OSError:
            continue
        remove_tree(entry.path)
        removed += 1
    return removed
