"""What `bench shell` counts CPU with (a process's and the whole machine's), and the sandbox
floor: sandboxed `true` started back to back, with nothing else running."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from bench import support
from bench.support import machine_busy_seconds


def cpu_of(pid: int) -> tuple[float, float]:
    """(own, reaped children's) user + system seconds of a live process; 0 once gone."""
    import psutil

    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0, 0.0
    return times.user + times.system, times.children_user + times.children_system


def cpu_snapshot(worker: int, beat: int) -> dict[str, dict[int, float]]:
    """CPU seconds so far per component, per process (processes come and go)."""
    import psutil
    from django.db import connection

    def family(pid: int) -> list[int]:
        try:
            return [pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))]
        except psutil.Error:
            return [pid]

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        )
        backends = [row[0] for row in cursor.fetchall()]
    port = str(support.redis().connection_pool.connection_kwargs.get("port", 6379))
    redis_pids = [
        proc.pid
        for proc in psutil.process_iter(["name", "cmdline"])
        if proc.info["name"] == "redis-server" and port in " ".join(proc.info["cmdline"] or [])
    ]
    pool = [pid for pid in family(worker) if pid != worker]
    return {
        "worker": {pid: cpu_of(pid)[0] for pid in family(worker)},
        # The pool processes reap what they start: bwrap (and setpriv/prlimit before it,
        # the same process), which has reaped its sandbox.
        "sandboxes": {pid: cpu_of(pid)[1] for pid in pool},
        "beat": {pid: sum(cpu_of(pid)) for pid in family(beat)},
        "postgres": {pid: cpu_of(pid)[0] for pid in backends},
        "redis": {pid: cpu_of(pid)[0] for pid in redis_pids},
    }


def cpu_used(before: dict, after: dict) -> dict[str, float]:
    return {
        part: sum(seconds - before[part].get(pid, 0.0) for pid, seconds in after[part].items())
        for part in after
    }


FLOOR_LAUNCHERS = 8
FLOOR_RUNS = 100  # per launcher


def sandbox_floor() -> list[str]:
    """What the machine pays for the sandbox alone: the argv a worker starts for `true`,
    run back to back by FLOOR_LAUNCHERS threads with nothing else going on; beside it plain
    `true` started the same way (the launchers' own cost). Run as root, both chains: a root
    worker's (setpriv and prlimit in front of bwrap) and bwrap alone (what a worker that is
    not root, the image's, starts; it sets the limits through bwrap's start gate, a
    handshake left out here). Sandboxes per second, and CPU per sandbox of the whole
    machine: namespaces are partly built and torn down by kernel threads that no process is
    charged for."""
    import subprocess

    from sandbox.argv import sandboxed_argv
    from sandbox.files import SandboxFiles
    from sandbox.identity import ROOT_WORKER_RUN_AS, resolve_identity
    from sandbox.profile import NETWORK_NONE
    from sandbox.rlimits import resolve_limits

    def sandboxed(identity: tuple[int, int] | None) -> Callable[[], None]:
        limits = [] if identity is None else resolve_limits(None)

        def start() -> None:
            with SandboxFiles(network=NETWORK_NONE, upstream=None) as files:
                argv = sandboxed_argv(["true"], limits=limits, files=files, run_as=identity)
                subprocess.run(
                    argv, pass_fds=files.fds(), env={"PATH": "/usr/bin:/bin"}, check=True
                )

        return start

    def bare() -> None:
        subprocess.run(["true"], check=True)

    starts = {"plain `true`": bare, "bwrap alone": sandboxed(None)}
    if os.geteuid() == 0:
        starts["setpriv+prlimit+bwrap (a root worker's)"] = sandboxed(
            resolve_identity(ROOT_WORKER_RUN_AS)
        )
    notes = []
    for name, start in starts.items():
        start()  # warm up

        def launcher(start: Callable[[], None] = start) -> None:
            for _ in range(FLOOR_RUNS):
                start()

        threads = [threading.Thread(target=launcher) for _ in range(FLOOR_LAUNCHERS)]
        busy_before, started = machine_busy_seconds(), time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed, busy = time.perf_counter() - started, machine_busy_seconds() - busy_before
        runs = FLOOR_LAUNCHERS * FLOOR_RUNS
        notes.append(
            f"{name}: {runs / elapsed:.0f}/s, {busy * 1000 / runs:.2f} ms of machine CPU each"
            f" ({busy / elapsed:.2f} of {os.cpu_count()} cores busy)"
        )
    return [
        f"sandbox floor (`true` started by {FLOOR_LAUNCHERS} threads x {FLOOR_RUNS}, nothing"
        " else running): " + "; ".join(notes)
    ]
