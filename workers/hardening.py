"""What a worker process does to keep its own secrets from the code it runs.

``PR_SET_DUMPABLE=0`` makes the kernel treat the process like a setuid program: its
``/proc/<pid>/environ``, ``mem``, ``maps`` and ``fd`` become root-owned and unreadable to
other processes of the same user, it cannot be ptrace-attached by them, and it writes no core
dump. A shell task started with ``WORKER_SHELL_SANDBOX=off``, or anything else running as the
worker's user, therefore cannot read the keys in the worker's environment or memory. The flag
is inherited over ``fork`` (Celery's prefork pool) and reset by ``execve``, so every worker
process sets it itself: the main process on ``worker_init``, each pool process on
``worker_process_init``.
"""

from __future__ import annotations

import ctypes
import logging

from celery.signals import worker_init, worker_process_init

logger = logging.getLogger(__name__)

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3


def _prctl(option: int, value: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    libc.prctl.restype = ctypes.c_int
    result = libc.prctl(option, value, 0, 0)
    if result < 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")
    return result


def process_make_undumpable() -> None:
    """Set PR_SET_DUMPABLE=0 on this process; raises OSError if the kernel refuses."""
    _prctl(PR_SET_DUMPABLE, 0)


def process_is_dumpable() -> bool:
    return _prctl(PR_GET_DUMPABLE, 0) != 0


@worker_init.connect
def _harden_main_process(**kwargs) -> None:
    process_make_undumpable()


@worker_process_init.connect
def _harden_pool_process(**kwargs) -> None:
    process_make_undumpable()
