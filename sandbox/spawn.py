"""Starting a shell task's process cheaply, and stopping all of it.

Why it looks like this: the worker is a ~100 MB Python process, and a ``preexec_fn`` forces
CPython to ``fork()`` it (copying its page tables) and run Python between fork and exec.
Without one, ``subprocess`` uses ``vfork()``, which costs the same for a big process as for a
small one. So the worker starts bwrap itself (``setpriv`` in front only when the worker is
root), and what used to happen in the pre-exec hook happens around bwrap instead:

    [setpriv --reuid --regid --clear-groups --]   only when the worker is root
    bwrap <profile> --info-fd I --block-fd B -- COMMAND...

The task's rlimits are set from the worker with ``prlimit(2)`` on the sandbox's first
process (``gate.StartGate``): bwrap reports that process's pid on ``--info-fd`` and the process
waits for a byte on ``--block-fd`` before it starts the command; the worker sets the limits
in between, then writes the byte. Rlimits are inherited on fork, so they apply to the
command and everything it starts, and nothing of the task runs before they are in place.
(This replaced a ``prlimit --`` exec in front of bwrap: one exec of a dynamically linked
program per run, about 1.5 ms of CPU.)

A root worker drops to an unprivileged user first (``setpriv``): root would ignore
RLIMIT_NPROC (a fork bomb cap) and there is no reason for tenant code to start from uid 0.
(Popen's own ``user=`` would do the same without an exec but rules out vfork: measured
slower.) Its sandbox then has another uid than the worker, and ``prlimit(2)`` on another
user's process needs CAP_SYS_RESOURCE: a root worker that holds it (a host or a VM) sets the
limits at the gate all the same; one without it (container runtimes drop it by default)
keeps ``prlimit --`` between ``setpriv`` and ``bwrap``:

    setpriv --reuid --regid --clear-groups -- prlimit --core=0:0 ... -- bwrap ...

The supervisor waits on a pidfd (no sleep polls), and ending a run is one ``SIGKILL`` to
bwrap: its init in the sandbox dies with it (parent-death signal) and takes the whole pid
namespace along. A graceful stop first sends ``SIGTERM`` to the processes inside.

The argv is built by ``argv.py``, the gate is ``gate.py``, the limits ``rlimits.py``; this
module starts the process and stops it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .egress import EgressNetwork
from .processes import sandbox_task_pids


@dataclass
class Launched:
    """A started task: the process the worker waits for, and how to stop everything."""

    proc: subprocess.Popen[bytes]
    pidfd: int | None
    sandboxed: bool
    egress: EgressNetwork | None = None
    # The host pid of the sandbox's init (pid 1 inside), once the start gate reported it.
    init_pid: int | None = None

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
