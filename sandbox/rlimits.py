"""A shell task's rlimits: what ``resource_requirements`` turn into, and how they are set.

Two ways in (`gate_sets_limits`): the worker sets them with ``prlimit(2)`` on the sandbox's
first process while it waits at the start gate (`set_limits`, ``gate.py``) when it may, that
is when the sandbox runs as the worker's own user, or as another user (a root worker's
sandboxes) while the worker holds CAP_SYS_RESOURCE; otherwise (a root worker in a container
runtime, which drops that capability by default) an exec of ``prlimit`` in the chain sets
them (`prlimit_argv`), one exec of a dynamically linked program more per run. Unsandboxed,
the child sets them itself before exec (``preexec.py``).
"""

from __future__ import annotations

import functools
import resource
from collections.abc import Mapping, Sequence

from .tools import tool_path_cached

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


_PRLIMIT_NAMES = {
    resource.RLIMIT_CORE: "core",
    resource.RLIMIT_CPU: "cpu",
    resource.RLIMIT_AS: "as",
    resource.RLIMIT_NOFILE: "nofile",
    resource.RLIMIT_NPROC: "nproc",
    resource.RLIMIT_FSIZE: "fsize",
}


# capability(7)'s number; CapEff in /proc/<pid>/status is a hex mask of them.
CAP_SYS_RESOURCE = 24


def gate_sets_limits(run_as: tuple[int, int] | None) -> bool:
    """Whether the worker sets the rlimits through the gate: when the sandbox runs as the
    worker's own user, or as another (a root worker's) while the worker holds
    CAP_SYS_RESOURCE, which ``prlimit(2)`` on another user's process needs (the sandbox's
    user namespace is owned by that user, so the kernel looks for the capability in the
    worker's own namespace). Without it: `prlimit` in the chain."""
    return run_as is None or holds_cap_sys_resource()


@functools.cache
def holds_cap_sys_resource() -> bool:
    """Whether this process has CAP_SYS_RESOURCE in its effective set (read once: a worker's
    capabilities do not change while it runs, and its pool processes inherit them)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> CAP_SYS_RESOURCE & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


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
