"""Starting a shell task's process cheaply, and stopping all of it.

Why it looks like this: the worker is a ~100 MB Python process, and a ``preexec_fn`` forces
CPython to ``fork()`` it (copying its page tables) and run Python between fork and exec.
Without one, ``subprocess`` uses ``vfork()``, which costs the same for a big process as for a
small one. Everything that used to happen in the pre-exec hook is done by small programs
chained with ``exec`` instead, each replacing the previous one in the same process:

    [setpriv --reuid --regid --clear-groups]   only when the worker is root
    prlimit --core=0:0 --nofile=... --          the task's rlimits (bwrap cannot set them)
    bwrap <profile> -- COMMAND...               namespaces, --die-with-parent, --new-session

Rlimits survive ``exec`` and bwrap's clone, so they apply to the command and everything it
starts. A root worker drops to an unprivileged user first: root would ignore RLIMIT_NPROC
(a fork bomb cap) and there is no reason for tenant code to start from uid 0. (Popen's own
``user=`` would do the same without an exec but rules out vfork: measured slower.)

The supervisor waits on a pidfd (no sleep polls), and ending a run is one ``SIGKILL`` to
bwrap: its init in the sandbox dies with it (parent-death signal) and takes the whole pid
namespace along. A graceful stop first sends ``SIGTERM`` to the processes inside.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .egress import EgressNetwork
from .sandbox import (
    NETWORK_EGRESS,
    SandboxFiles,
    drop_privileges_argv,
    filesystem_options,
    namespace_options,
    tool_path,
)

_PRLIMIT_NAMES = {
    resource.RLIMIT_CORE: "core",
    resource.RLIMIT_CPU: "cpu",
    resource.RLIMIT_AS: "as",
    resource.RLIMIT_NOFILE: "nofile",
    resource.RLIMIT_NPROC: "nproc",
    resource.RLIMIT_FSIZE: "fsize",
}


def _limit_value(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


def prlimit_argv(limits: Sequence[tuple[int, int, int]]) -> list[str]:
    prlimit = tool_path("prlimit") or "prlimit"
    argv = [prlimit]
    for res, soft, hard in limits:
        argv.append(f"--{_PRLIMIT_NAMES[res]}={_limit_value(soft)}:{_limit_value(hard)}")
    argv.append("--")
    return argv


def sandboxed_argv(
    command: Sequence[str],
    *,
    limits: Sequence[tuple[int, int, int]],
    files: SandboxFiles,
    network: str,
    run_as: tuple[int, int] | None = None,
    scratch_bytes: int | None = None,
    egress: EgressNetwork | None = None,
    bwrap: str = "bwrap",
) -> list[str]:
    argv = [*drop_privileges_argv(run_as), *prlimit_argv(limits), tool_path(bwrap) or bwrap]
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
    if network == NETWORK_EGRESS and egress is not None:
        argv += egress.bwrap_options()
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
        if not entry.isdigit():
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
