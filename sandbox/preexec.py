"""The pre-exec hook of an unsandboxed child (``WORKER_SHELL_SANDBOX=off``, a container
runtime's CLI): its parent-death signal, its rlimits, then its user.

It runs between fork and exec of a possibly multi-threaded worker, so it only uses values
computed beforehand and makes plain system calls (no imports, no logging); ``prctl`` is
resolved once, at import.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
from collections.abc import Callable, Sequence

_PR_SET_PDEATHSIG = 1
_SIGKILL = int(signal.SIGKILL)


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


def make_preexec(
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
