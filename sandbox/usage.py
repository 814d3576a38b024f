"""What a sandbox's processes use, read from the sandbox's own /proc while it runs.

Why not the rusage of reaping bwrap: bwrap's init (pid 1 inside) reaps the command, but the
outer bwrap learns the exit status from an eventfd and exits without reaping its init, so
the rusage `wait4` returns for bwrap holds bwrap alone (a few MiB, no CPU of the task). And
`getrusage(RUSAGE_CHILDREN)` deltas would mix the runs of a worker process's lanes. There is
no cgroup of the sandbox's own to read (unprivileged workers cannot make one).

So the worker samples: the sandbox's fresh /proc (reached from the host as
``/proc/<init pid>/root/proc``) lists only the sandbox's processes, a few files to read, not
the host's whole /proc. Each sample sums, over them, CPU (utime + stime of the live ones and
cutime + cstime, what they reaped) and peak resident memory (each process's VmHWM, which the
kernel keeps, so a peak between two samples is not missed while its process lives). The run's
figures are the largest sums seen. What they miss: CPU of the last interval before the end,
and a process that lived and died between two samples (documented in docs/tasks/sizing.md).
"""

from __future__ import annotations

import os

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
KIB = 1024


class SandboxUsage:
    def __init__(self, init_pid: int) -> None:
        self.proc = f"/proc/{init_pid}/root/proc"
        self.cpu_seconds = 0.0
        self.peak_memory_bytes = 0
        self.samples = 0

    def sample(self) -> None:
        try:
            entries = os.listdir(self.proc)
        except OSError:
            return  # the sandbox is gone (or not yet there)
        ticks = 0
        peak_kib = 0
        for entry in entries:
            if not (entry.isascii() and entry.isdigit()):
                continue
            ticks += self._ticks(entry)
            peak_kib += self._hwm_kib(entry)
        self.samples += 1
        self.cpu_seconds = max(self.cpu_seconds, ticks / CLOCK_TICKS)
        self.peak_memory_bytes = max(self.peak_memory_bytes, peak_kib * KIB)

    def _ticks(self, pid: str) -> int:
        try:
            with open(f"{self.proc}/{pid}/stat", "rb") as stat:
                raw = stat.read()
        except OSError:
            return 0
        # "pid (comm) state ppid ...": after the comm, utime..cstime are fields 11-14.
        fields = raw[raw.rfind(b")") + 1 :].split()
        try:
            return sum(int(value) for value in fields[11:15])
        except ValueError:
            return 0

    def _hwm_kib(self, pid: str) -> int:
        try:
            with open(f"{self.proc}/{pid}/status", "rb") as status:
                for line in status:
                    if line.startswith(b"VmHWM:"):
                        return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            return 0
        return 0
