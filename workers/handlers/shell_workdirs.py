"""The unsandboxed path's working directories: removed after each run, and those a killed
worker left behind (a sandbox's work directory is a tmpfs that dies with it)."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import time

WORKDIR_PREFIX = "task-run-"


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
