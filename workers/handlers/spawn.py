"""Starting a shell task's process cheaply, and stopping all of it.

Why it looks like this: the worker is a ~100 MB Python process, and a ``preexec_fn`` forces
CPython to ``fork()`` it (copying its page tables) and run Python between fork and exec.
Without one, ``subprocess`` uses ``vfork()``, which costs the same for a big process as for a
small one. So the worker starts bwrap itself (``setpriv`` in front only when the worker is
root), and what used to happen in the pre-exec hook happens around bwrap instead:

    [setpriv --reuid --regid --clear-groups --]   only when the worker is root
    bwrap <profile> --info-fd I --block-fd B -- COMMAND...

The task's rlimits are set from the worker with ``prlimit(2)`` on the sandbox's first
process (``StartGate``): bwrap reports that process's pid on ``--info-fd`` and the process
waits for a byte on ``--block-fd`` before it starts the command; the worker sets the limits
in between, then writes the byte. Rlimits are inherited on fork, so they apply to the
command and everything it starts, and nothing of the task runs before they are in place.
(This replaced a ``prlimit --`` exec in front of bwrap: one exec of a dynamically linked
program per run, about 1.5 ms of CPU.)

A root worker drops to an unprivileged user first (``setpriv``): root would ignore
RLIMIT_NPROC (a fork bomb cap) and there is no reason for tenant code to start from uid 0.
(Popen's own ``user=`` would do the same without an exec but rules out vfork: measured
slower.) Its sandbox then has another uid than the worker, and ``prlimit(2)`` on another
user's process needs CAP_SYS_RESOURCE, which container runtimes drop by default; so that
chain keeps ``prlimit --`` between ``setpriv`` and ``bwrap``:

    setpriv --reuid --regid --clear-groups -- prlimit --core=0:0 ... -- bwrap ...

The supervisor waits on a pidfd (no sleep polls), and ending a run is one ``SIGKILL`` to
bwrap: its init in the sandbox dies with it (parent-death signal) and takes the whole pid
namespace along. A graceful stop first sends ``SIGTERM`` to the processes inside.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .egress import EgressNetwork
from .sandbox import (
    SandboxFiles,
    drop_privileges_argv,
    filesystem_options,
    namespace_options,
    tool_path_cached,
)

# How long the worker waits for bwrap to report its sandbox's pid.
START_TIMEOUT_SECONDS = 10.0


class SandboxStartError(RuntimeError):
    pass


class StartGate:
    """bwrap's ``--info-fd`` (it writes the sandbox's pid there) and ``--block-fd`` (the
    sandbox waits for a byte there before it starts the command): between the two, the
    worker sets the task's rlimits and, with egress, attaches the network.

    It fails closed. bwrap goes on at end-of-file as it does on a byte, and the sandbox's
    parent-death signal is only armed after the gate, so a worker that died at the gate
    would let the command run without its limits or anyone watching it. So bwrap also
    inherits the block pipe's write end: the sandbox holds a writer itself, never sees
    end-of-file, and only the worker's byte lets it go. A worker that dies at the gate
    leaves a sandbox asleep there, never a command running; a failure at the gate kills
    the sandbox (`kill`)."""

    def __init__(self) -> None:
        self._info_read, self._info_write = os.pipe()
        self._block_read, self._block_write = os.pipe()
        os.set_inheritable(self._info_read, False)  # ours only
        self._pidfd = -1

    def bwrap_options(self) -> list[str]:
        return ["--info-fd", str(self._info_write), "--block-fd", str(self._block_read)]

    def fds_for_bwrap(self) -> tuple[int, ...]:
        """For pass_fds: the write end goes along, unnamed (see the class doc)."""
        return (self._info_write, self._block_read, self._block_write)

    def sandbox_pid(self) -> int:
        """After bwrap started: the host pid of the sandbox's first process (its init)."""
        for name in ("_info_write", "_block_read"):  # bwrap has its copies
            self._close(name)
        pid = self._read_pid()
        with contextlib.suppress(OSError):
            # To kill that very process at a failure, even once bwrap is gone.
            self._pidfd = os.pidfd_open(pid)
        return pid

    def kill(self) -> None:
        """SIGKILL the sandbox's init, held at the gate (bwrap's death does not end it)."""
        if self._pidfd >= 0:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def _read_pid(self) -> int:
        # bwrap writes one JSON object and may keep the descriptor open: parse as it comes.
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        raw = b""
        with selectors.DefaultSelector() as selector:
            selector.register(self._info_read, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if not selector.select(max(0.0, deadline - time.monotonic())):
                    continue
                chunk = os.read(self._info_read, 1 << 16)
                raw += chunk
                try:
                    return int(json.loads(raw)["child-pid"])
                except (ValueError, KeyError, TypeError) as error:
                    if not chunk:
                        raise SandboxStartError("bwrap did not report its sandbox") from error
        raise SandboxStartError("timed out waiting for the sandbox to start")

    def release(self) -> None:
        """Let the sandbox start the command."""
        os.write(self._block_write, b"1")
        self.close()

    def close(self) -> None:
        for name in ("_info_read", "_info_write", "_block_read", "_block_write", "_pidfd"):
            self._close(name)

    def _close(self, name: str) -> None:
        fd = getattr(self, name)
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
            setattr(self, name, -1)


_PRLIMIT_NAMES = {
    resource.RLIMIT_CORE: "core",
    resource.RLIMIT_CPU: "cpu",
    resource.RLIMIT_AS: "as",
    resource.RLIMIT_NOFILE: "nofile",
    resource.RLIMIT_NPROC: "nproc",
    resource.RLIMIT_FSIZE: "fsize",
}


def gate_sets_limits(run_as: tuple[int, int] | None) -> bool:
    """Whether the worker sets the rlimits through the gate: when the sandbox runs as the
    worker's own user (a root worker's runs as another user: `prlimit` in the chain)."""
    return run_as is None


def prlimit_argv(limits: Sequence[tuple[int, int, int]]) -> list[str]:
    def value(limit: int) -> str:
        return "unlimited" if limit == resource.RLIM_INFINITY else str(limit)

    argv = [tool_path_cached("prlimit")]
    for res, soft, hard in limits:
        argv.append(f"--{_PRLIMIT_NAMES[res]}={value(soft)}:{value(hard)}")
    argv.append("--")
    return argv


def set_limits(pid: int, limits: Sequence[tuple[int, int, int]]) -> None:
    """``prlimit(2)`` on another process: the sandbox's init, which has the worker's (or the
    run-as user's) uid, before it starts the command. Raises OSError (ESRCH: it is gone)."""
    for res, soft, hard in limits:
        resource.prlimit(pid, res, (soft, hard))


def sandboxed_argv(
    command: Sequence[str],
    *,
    limits: Sequence[tuple[int, int, int]],
    files: SandboxFiles,
    run_as: tuple[int, int] | None = None,
    scratch_bytes: int | None = None,
    gate: StartGate | None = None,
    bwrap: str = "bwrap",
) -> list[str]:
    """The argv that starts ``command`` in the sandbox. ``gate``: the start gate the caller
    opens (`StartGate.sandbox_pid`, then `set_limits` when `gate_sets_limits`, egress, then
    `StartGate.release`); None only for a run without limits (the availability probe)."""
    argv = drop_privileges_argv(run_as)
    if not gate_sets_limits(run_as):
        argv += prlimit_argv(limits)
    elif limits and gate is None:
        raise ValueError("the worker sets these rlimits through a start gate")
    argv.append(tool_path_cached(bwrap))
    argv += namespace_options()
    # Inside, the sandbox runs as the user the chain starts as: run_as, or the worker's own.
    identity = run_as or (os.getuid(), os.getgid())
    if scratch_bytes is None:
        argv += filesystem_options(identity=identity)
    else:
        argv += filesystem_options(identity=identity, scratch_bytes=scratch_bytes)
    argv += files.bwrap_options()
    # Last, once every file is in place: the sandbox's root (bwrap's tmpfs holding /etc and
    # the mount points) becomes read-only; /task and /tmp are mounts of their own and stay
    # writable.
    argv += ["--remount-ro", "/"]
    if gate is not None:
        argv += gate.bwrap_options()
    argv.append("--")
    argv += list(command)
    return argv


@dataclass
class Launched:
    """A started task: the process the worker waits for, and how to stop everything."""

    proc: subprocess.Popen[bytes]
    pidfd: int | None
    sandboxed: bool
    egress: EgressNetwork | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def terminate(self) -> None:
        """Ask politely: SIGTERM to the task's processes (not to bwrap, which would die and
        take the sandbox down at once), or to the process group when unsandboxed."""
        if self.proc.returncode is not None:
            return
        if not self.sandboxed:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            return
        for pid in sandbox_task_pids(self.proc.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)

    def kill(self) -> None:
        """Everything, now. Sandboxed: SIGKILL to bwrap ends its pid namespace."""
        if self.proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.sandboxed:
                os.kill(self.proc.pid, signal.SIGKILL)
            else:
                os.killpg(self.proc.pid, signal.SIGKILL)

    def close(self) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
            self.pidfd = None
        if self.egress is not None:
            self.egress.close()
            self.egress = None


def launch(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    stdin_piped: bool,
    pass_fds: Sequence[int] = (),
    sandboxed: bool,
    cwd: str | None = None,
    preexec_fn: object = None,
) -> Launched:
    """Start ``argv`` in a new session with piped stdout/stderr; raises OSError on failure."""
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE if stdin_piped else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env),
        cwd=cwd,
        close_fds=True,
        pass_fds=tuple(pass_fds),
        start_new_session=True,
        preexec_fn=preexec_fn,  # type: ignore[arg-type]
        bufsize=0,
    )
    pidfd: int | None
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = None  # old kernel: the supervisor falls back to a short poll
    return Launched(proc=proc, pidfd=pidfd, sandboxed=sandboxed)


def sandbox_task_pids(bwrap_pid: int) -> list[int]:
    """Host pids of the processes inside bwrap's sandbox, bwrap's own two excluded.

    bwrap (``bwrap_pid``) -> its init, pid 1 inside -> the command and its descendants. One
    pass over /proc/*/stat; only used to deliver a graceful SIGTERM on timeout.
    """
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not (entry.isascii() and entry.isdigit()):
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 1 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    inits = children.get(bwrap_pid, [])
    found: list[int] = []
    pending = [pid for init in inits for pid in children.get(init, [])]
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending.extend(children.get(pid, []))
    return found
