"""Loaded (as sitecustomize) only by a process the nemesis runs under libfaketime with the
monotonic clock left real (tests/chaos/nemesis.py, faketime_env).

libfaketime 0.9.10 (Debian's) turns Python 3.11's time.sleep, an absolute clock_nanosleep on
CLOCK_MONOTONIC, into a call the kernel refuses (EINVAL: libfaketime issue #426). select()
takes a relative timeout and sleeps the real time, which is what the beat asks for."""

import select
import time


def _sleep(seconds: float) -> None:
    if seconds > 0:
        select.select([], [], [], seconds)


time.sleep = _sleep
