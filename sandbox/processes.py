"""What /proc says about a task's processes: the ones inside a sandbox (for a graceful
SIGTERM), and the live members of an unsandboxed task's process group (to wait for them).
"""

from __future__ import annotations

import os
import time


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


def wait_for_group_exit(pgid: int, timeout: float) -> bool:
    """Wait until every process in ``pgid`` is dead (SIGKILL delivery is asynchronous).

    Only called after the leader is reaped: a zombie leader would keep the group "alive".
    While any member exists the pgid cannot be reused, so probing it with signal 0 is safe.
    Orphaned members are reaped by init, which may take a while; a group holding only zombies
    counts as dead.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        time.sleep(0.02)
        if not live_group_members(pgid):
            return True
        if time.monotonic() >= deadline:
            return False


def live_group_members(pgid: int) -> list[int]:
    """PIDs of non-zombie processes in process group ``pgid`` (from /proc)."""
    members: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for entry in entries:
        if not (entry.isascii() and entry.isdigit()):
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may contain spaces and parentheses.
        fields = raw[raw.rfind(b")") + 1 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            members.append(int(entry))
    return members
