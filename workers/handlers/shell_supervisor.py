"""The loop that watches a shell task's process until it ends, sandboxed or not.

stdout and stderr are read with one ``selectors`` loop on non-blocking pipes, which also
watches a pidfd of the child: no reader threads, no deadlock on large output, no sleep polls
to notice the exit. Lines go straight to the log sink (``LineSplitter.emit_line``). Cancel
and the deadline are enforced here: SIGTERM first on timeout, SIGKILL after the grace. The
worker's preemption (``ctx.preempted``) sends SIGTERM too, once, to a task that takes part
in checkpointing (``preempt_aware``: it resumed from, or wrote, its checkpoint file): when
it then exits (its file written) its run is handed back rather than failed. Another task
runs on until the drain's deadline, as it always did. The child is reaped
with ``os.wait4``, whose rusage is the run's CPU and peak memory (``usage.py``).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import time
from collections.abc import Callable
from typing import Any

from handler_contract.base import (
    PREEMPTED,
    STATUS_CANCELLED,
    STATUS_FAILED,
    STATUS_SUCCESS,
    STATUS_TIMED_OUT,
    HandlerContext,
    HandlerOutcome,
    LogSink,
    clip,
    loads_strict,
)
from sandbox.processes import wait_for_group_exit
from sandbox.spawn import Launched
from sandbox.usage import SandboxUsage

from .progress_lines import progress_line_taker
from .shell_lines import LineSplitter
from .shell_outcomes import describe_exit
from .usage import rusage_usage

READ_CHUNK_BYTES = 64 * 1024
# Upper bound on how late cancellation and timeouts are noticed.
POLL_INTERVAL_SECONDS = 0.05
# After the process group is dead, how long to wait for EOF from processes that escaped it.
DRAIN_SECONDS = 2.0
# How long to wait for SIGKILLed group members to actually disappear.
GROUP_EXIT_WAIT_SECONDS = 2.0

# How often a sandbox's processes are sampled for their CPU and memory (sandbox.usage), and
# when the first sample comes: a run gone before it reads no peak memory (None).
USAGE_SAMPLE_SECONDS = 0.2
FIRST_USAGE_SAMPLE_SECONDS = 0.05

# Selector tags besides the output splitters.
_STDIN = "stdin"
_EXITED = "exited"


class Supervisor:
    """Pumps the child's pipes, notices its exit on a pidfd, enforces cancel and deadline."""

    def __init__(
        self,
        launched: Launched,
        ctx: HandlerContext,
        log: LogSink,
        stdin_data: bytes | None,
        kill_grace_seconds: float,
        preempt_aware: Callable[[], bool] | None = None,
    ) -> None:
        self.launched = launched
        self.proc = launched.proc
        self.ctx = ctx
        self.log = log
        self.kill_grace_seconds = kill_grace_seconds
        self.preempt_aware = preempt_aware
        secrets = [s for s in ctx.secrets_to_mask if s]
        # The splitters mask before cutting long lines, so they can write to the raw sink.
        self.stdout = LineSplitter(
            "stdout", ctx.log, secrets, keep_last_line=True, take_line=progress_line_taker(ctx)
        )
        self.stderr = LineSplitter("stderr", ctx.log, secrets, keep_last_line=False)
        self.selector = selectors.DefaultSelector()
        self._stdin_pending = memoryview(stdin_data) if stdin_data is not None else None
        self._reaped = False
        self._exited = False
        self.cpu_seconds: float | None = None
        self.peak_memory_bytes: int | None = None
        init_pid = launched.init_pid if launched.sandboxed else None
        self.usage = SandboxUsage(init_pid) if init_pid is not None else None

    def run(self) -> HandlerOutcome:
        try:
            outcome = self._run()
        finally:
            self._cleanup()
        outcome.cpu_seconds = self.cpu_seconds
        outcome.peak_memory_bytes = self.peak_memory_bytes
        return outcome

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
        preempted = False
        # The first sample soon after the start, so a short run is measured too.
        next_sample = started + FIRST_USAGE_SAMPLE_SECONDS

        while True:
            self._pump(POLL_INTERVAL_SECONDS)
            if self._leader_exited():
                break
            now = time.monotonic()
            if self.usage is not None and now >= next_sample:
                self.usage.sample()
                next_sample = now + USAGE_SAMPLE_SECONDS
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
            elif final_status is None and not preempted and self._preempted_now():
                # No kill after it: the drain's deadline hands the run back (and stops it).
                preempted = True
                self.log.write("system", "the worker is being preempted: sending SIGTERM")
                self.launched.terminate()

        if not self.launched.sandboxed:
            # The leader is a zombie, so its pid (== pgid) cannot be reused yet: kill whatever
            # it left behind in its group before reaping it.
            self.launched.kill()
        returncode = self._reap()
        if not self.launched.sandboxed:
            wait_for_group_exit(proc.pid, GROUP_EXIT_WAIT_SECONDS)
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
        if final_status is None and preempted:
            return HandlerOutcome(
                status=STATUS_FAILED,
                exit_code=returncode,
                error_class=PREEMPTED,
                error_message=f"stopped for the worker's preemption ({self._describe(returncode)})",
                transient=True,
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

    def _preempted_now(self) -> bool:
        return (
            self.ctx.preempted.is_set() and self.preempt_aware is not None and self.preempt_aware()
        )

    def _reap(self) -> int:
        """Reap the child with its rusage (Popen.wait would throw that away)."""
        proc = self.proc
        try:
            _pid, status, usage = os.wait4(proc.pid, 0)
        except ChildProcessError:
            returncode = proc.wait()  # reaped elsewhere: no usage to report
        else:
            returncode = os.waitstatus_to_exitcode(status)
            proc.returncode = returncode
            self.cpu_seconds, self.peak_memory_bytes = rusage_usage(usage)
            if self.usage is not None:
                # bwrap's own rusage lacks the task's (sandbox.usage): the samples have it.
                self.cpu_seconds = round(max(self.cpu_seconds, self.usage.cpu_seconds), 4)
                # Never bwrap's ru_maxrss: the kernel keeps in it the high-water mark of the
                # image it had before its exec, a copy of this worker process (hundreds of
                # MiB), which made a small task read as large as its worker. Unsampled (gone
                # before the first sample): unknown, not the worker's size.
                self.peak_memory_bytes = (
                    self.usage.peak_memory_bytes if self.usage.samples else None
                )
        self._reaped = True
        return returncode

    def _describe(self, returncode: int) -> str:
        return describe_exit(returncode, sandboxed=self.launched.sandboxed)

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
            if isinstance(key.data, LineSplitter):
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
