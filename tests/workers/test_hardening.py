"""A worker process's environment (its keys) is unreadable to other processes of its user
once it is undumpable, which every worker process makes itself (workers.hardening)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from celery.signals import worker_init, worker_process_init

from workers import hardening

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOBODY = 65534
SECRET = "worker-secret-key-0451"

# Becomes `nobody` (a change of user resets the flag, so it is set back to dumpable to
# start from what an ordinary process is), then hardens itself on request.
CHILD = f"""
import ctypes, os, sys
from workers.hardening import _harden_pool_process, process_is_dumpable
os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY})
ctypes.CDLL(None).prctl(4, 1, 0, 0)
print("dumpable" if process_is_dumpable() else "undumpable", flush=True)
sys.stdin.readline()
_harden_pool_process()
print("dumpable" if process_is_dumpable() else "undumpable", flush=True)
sys.stdin.readline()
"""


def _read_environ_as_nobody(pid: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            "--",
            "cat",
            f"/proc/{pid}/environ",
        ],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_an_undumpable_worker_process_hides_its_environment_from_its_own_user():
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ROOT, "SECRET_KEY": SECRET},
    )
    try:
        assert child.stdin is not None and child.stdout is not None
        assert child.stdout.readline().strip() == "dumpable"
        # The attack works against an ordinary process of the same user ...
        before = _read_environ_as_nobody(child.pid)
        assert SECRET in before.stdout
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "undumpable"
        # ... and fails once the process hardened itself.
        after = _read_environ_as_nobody(child.pid)
        assert after.returncode != 0
        assert SECRET not in after.stdout
        assert "Permission denied" in after.stderr
    finally:
        child.kill()
        child.wait()


def test_both_kinds_of_worker_process_harden_themselves():
    # The main process (worker_init) and every prefork pool process (worker_process_init).
    assert hardening._harden_main_process in [ref() for _, ref in worker_init.receivers]
    assert hardening._harden_pool_process in [ref() for _, ref in worker_process_init.receivers]
