"""The start gate between bwrap's start and the command's: the worker learns the sandbox's
pid, sets its rlimits and attaches its network there, then lets the command go.

bwrap reports its sandbox's first process on ``--info-fd``, and that process waits for a byte
on ``--block-fd`` before it starts the command. Rlimits are inherited on fork, so limits set
on that process in between apply to the command and everything it starts, and nothing of the
task runs before they are in place.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import time

# How long the worker waits for bwrap to report its sandbox's pid.
START_TIMEOUT_SECONDS = 10.0


class SandboxStartError(RuntimeError):
    pass


class StartGate:
    """bwrap's ``--info-fd`` (it writes the sandbox's pid there) and ``--block-fd`` (the
    sandbox waits for a byte there before it starts the command): between the two, the
    worker sets the task's rlimits and, with egress, attaches the network.

    It fails closed. bwrap goes on at end-of-file as it does on a byte, and the sandbox's
    parent-death signal is only armed after the gate, so a worker that died at the gate
    would let the command run without its limits or anyone watching it. So bwrap also
    inherits the block pipe's write end: the sandbox holds a writer itself, never sees
    end-of-file, and only the worker's byte lets it go. A worker that dies at the gate
    leaves a sandbox asleep there, never a command running; a failure at the gate kills
    the sandbox (`kill`)."""

    def __init__(self) -> None:
        self._info_read, self._info_write = os.pipe()
        self._block_read, self._block_write = os.pipe()
        os.set_inheritable(self._info_read, False)  # ours only
        self._pidfd = -1

    def bwrap_options(self) -> list[str]:
        return ["--info-fd", str(self._info_write), "--block-fd", str(self._block_read)]

    def fds_for_bwrap(self) -> tuple[int, ...]:
        """For pass_fds: the write end goes along, unnamed (see the class doc)."""
        return (self._info_write, self._block_read, self._block_write)

    def sandbox_pid(self) -> int:
        """After bwrap started: the host pid of the sandbox's first process (its init)."""
        for name in ("_info_write", "_block_read"):  # bwrap has its copies
            self._close(name)
        pid = self._read_pid()
        with contextlib.suppress(OSError):
            # To kill that very process at a failure, even once bwrap is gone.
            self._pidfd = os.pidfd_open(pid)
        return pid

    def kill(self) -> None:
        """SIGKILL the sandbox's init, held at the gate (bwrap's death does not end it)."""
        if self._pidfd >= 0:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def _read_pid(self) -> int:
        # bwrap writes one JSON object and may keep the descriptor open: parse as it comes.
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        raw = b""
        with selectors.DefaultSelector() as selector:
            selector.register(self._info_read, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if not selector.select(max(0.0, deadline - time.monotonic())):
                    continue
                chunk = os.read(self._info_read, 1 << 16)
                raw += chunk
                try:
                    return int(json.loads(raw)["child-pid"])
                except (ValueError, KeyError, TypeError) as error:
                    if not chunk:
                        raise SandboxStartError("bwrap did not report its sandbox") from error
        raise SandboxStartError("timed out waiting for the sandbox to start")

    def release(self) -> None:
        """Let the sandbox start the command."""
        os.write(self._block_write, b"1")
        self.close()

    def close(self) -> None:
        for name in ("_info_read", "_info_write", "_block_read", "_block_write", "_pidfd"):
            self._close(name)

    def _close(self, name: str) -> None:
        fd = getattr(self, name)
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
            setattr(self, name, -1)
