"""The argv that starts a command in the sandbox: the chain of small programs in front of it.

    [setpriv --reuid --regid --clear-groups --]   only when the worker is root
    [prlimit --core=0:0 ... --]                  only then too, and only without
                                                 CAP_SYS_RESOURCE (see ``rlimits.py``)
    bwrap <profile> [--info-fd I --block-fd B] -- COMMAND...

No pre-exec hook: the worker starts it with vfork (``spawn.py`` says why).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from .files import SandboxFiles
from .gate import StartGate
from .identity import drop_privileges_argv
from .profile import filesystem_options, namespace_options
from .rlimits import gate_sets_limits, prlimit_argv
from .tools import tool_path_cached


def sandboxed_argv(
    command: Sequence[str],
    *,
    limits: Sequence[tuple[int, int, int]],
    files: SandboxFiles,
    run_as: tuple[int, int] | None = None,
    scratch_bytes: int | None = None,
    gate: StartGate | None = None,
    bwrap: str = "bwrap",
    binds: Sequence[tuple[str, str]] = (),
) -> list[str]:
    """The argv that starts ``command`` in the sandbox. ``gate``: the start gate the caller
    opens (`StartGate.sandbox_pid`, then `set_limits` when `gate_sets_limits`, egress, then
    `StartGate.release`); None only for a run without limits (the availability probe).
    `binds`: (host path, sandbox path) pairs bound writable (a run's checkpoint file)."""
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
    for source, destination in binds:
        argv += ["--bind", source, destination]
    # Last, once every file is in place: the sandbox's root (bwrap's tmpfs holding /etc and
    # the mount points) becomes read-only; /task and /tmp are mounts of their own and stay
    # writable.
    argv += ["--remount-ro", "/"]
    if gate is not None:
        argv += gate.bwrap_options()
    argv.append("--")
    argv += list(command)
    return argv
