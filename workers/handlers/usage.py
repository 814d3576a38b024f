"""What a run used: CPU seconds (user + system) and peak memory (resident).

* Shell runs: the rusage the kernel returns when the worker reaps the sandbox's bwrap
  (`os.wait4`): CPU of bwrap and of every process of the sandbox that was reaped inside it
  (the pid namespace's init reaps them all), and the largest resident set among them
  (Linux's `ru_maxrss`, KiB). Per child, so concurrent runs of one worker process (a batch's
  lanes) never mix: `getrusage(RUSAGE_CHILDREN)` deltas would.
* Python runs (in the pool process, one at a time): the process's CPU time delta
  (`RUSAGE_SELF`; the watcher thread's few milliseconds are in it), and the growth of its
  peak resident set over what it held at the start: the peak (VmHWM) is reset to the current
  size first (`/proc/self/clear_refs` "5", Linux 4.0+), so an earlier run's peak does not
  hide this one's. Where that reset is refused, the growth of `ru_maxrss` (which only shows
  a run that reached a new peak for the process).
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

from handler_contract.base import HandlerOutcome

KIB = 1024


def rusage_usage(usage: resource.struct_rusage) -> tuple[float, int]:
    """(cpu seconds, peak resident bytes) of a reaped child's rusage."""
    return round(usage.ru_utime + usage.ru_stime, 4), int(usage.ru_maxrss) * KIB


def _status_kib(field: bytes) -> int | None:
    """One field of /proc/self/status, in KiB. Read as bytes in one call and searched: on the
    run path of every python run, twice (the text-mode line loop cost 29 µs a read here)."""
    try:
        descriptor = os.open("/proc/self/status", os.O_RDONLY)
        try:
            status = os.read(descriptor, 8192)
        finally:
            os.close(descriptor)
        start = status.index(field) + len(field)
        return int(status[start : status.index(b"kB", start)])
    except (OSError, ValueError):
        return None


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return True


@dataclass
class InProcessUsage:
    """The usage of code run in this process between `start()` and `stop()`."""

    cpu_start: float = 0.0
    rss_start_kib: int = 0
    maxrss_start_kib: int = 0
    peak_reset: bool = False

    def start(self) -> InProcessUsage:
        self.peak_reset = _reset_peak()
        self.rss_start_kib = _status_kib(b"VmRSS:") or 0
        own = resource.getrusage(resource.RUSAGE_SELF)
        self.cpu_start = own.ru_utime + own.ru_stime
        self.maxrss_start_kib = own.ru_maxrss
        return self

    def stop(self) -> tuple[float, int]:
        own = resource.getrusage(resource.RUSAGE_SELF)
        cpu = max(0.0, own.ru_utime + own.ru_stime - self.cpu_start)
        peak_kib = _status_kib(b"VmHWM:") if self.peak_reset else None
        if peak_kib is not None:
            growth = peak_kib - self.rss_start_kib
        else:
            growth = own.ru_maxrss - self.maxrss_start_kib
        return round(cpu, 4), max(0, growth) * KIB


def measured(outcome: HandlerOutcome, cpu_seconds: float, peak_memory_bytes: int) -> HandlerOutcome:
    """`outcome` with its usage (changed in place)."""
    outcome.cpu_seconds = cpu_seconds
    outcome.peak_memory_bytes = peak_memory_bytes
    return outcome
