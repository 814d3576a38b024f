"""Outbound network for a sandbox whose task says ``"network": "egress"`` (tenant allowing).

The sandbox keeps its own empty network namespace; slirp4netns, a user-mode TCP/IP stack,
attaches a tap device to it and makes the task's connections as ordinary sockets of the
worker's host. ``--disable-host-loopback`` refuses the gateway address (10.0.2.2) that would
otherwise lead to the host's 127.0.0.1; the task's own 127.0.0.1 is its namespace's loopback,
which holds nothing.

Since slirp4netns connects from the worker, the sandbox's routing table is what keeps the
task from the rest of the worker's reach: the private, link-local and metadata ranges, the
worker's own addresses and the platform's Redis and PostgreSQL are unreachable routes there
(``egress_filter``), written before the command starts. So egress reaches the public
internet (IPv4, and names through slirp4netns's DNS forwarder) and nothing else.

The network is attached through the run's start gate (``gate.StartGate``: bwrap's
``--info-fd`` and ``--block-fd``), so the command never runs before its network.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import selectors
import signal
import subprocess
import time

from .egress_filter import EgressFilterError, EgressPolicy, apply_policy
from .tools import tool_path

SETUP_TIMEOUT_SECONDS = 10.0
TAP_NAME = "tap0"
LOOPBACK_UP_MARK = "/8 host LOCAL"  # 127.0.0.0/8 in /proc/<pid>/net/fib_trie, once `lo` is up
NS_GET_USERNS = 0xB701  # _IO(0xb7, 0x1): the user namespace owning a namespace


class EgressSetupError(RuntimeError):
    pass


class EgressNetwork:
    """The slirp4netns process serving one sandbox."""

    def __init__(self, policy: EgressPolicy | None = None) -> None:
        if tool_path("slirp4netns") is None:
            raise EgressSetupError("slirp4netns is not installed on this worker")
        self._policy = policy or EgressPolicy()
        self._slirp: subprocess.Popen[bytes] | None = None

    def attach(self, sandbox_pid: int) -> None:
        """After bwrap reported its sandbox (``sandbox_pid``) and before the gate lets the
        command run: give the sandbox's namespace a network, filtered."""
        self._wait_for_loopback(sandbox_pid)
        # bwrap nests a second user namespace inside the one that owns the sandbox's network
        # namespace; slirp4netns must join the owner, which the kernel names (NS_GET_USERNS).
        net_fd = os.open(f"/proc/{sandbox_pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            owner_fd = fcntl.ioctl(net_fd, NS_GET_USERNS)
        finally:
            os.close(net_fd)
        ready_read, ready_write = os.pipe()
        try:
            self._slirp = subprocess.Popen(
                [
                    tool_path("slirp4netns") or "slirp4netns",
                    "--configure",
                    "--mtu=65520",
                    "--disable-host-loopback",
                    f"--ready-fd={ready_write}",
                    f"--userns-path=/proc/self/fd/{owner_fd}",
                    str(sandbox_pid),
                    TAP_NAME,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env={"PATH": "/usr/bin:/bin"},
                pass_fds=(ready_write, owner_fd),
                start_new_session=True,
            )
            os.close(ready_write)
            ready_write = -1
            if self._read_within(ready_read, 1) != b"1":
                raise EgressSetupError(f"slirp4netns did not come up: {self._slirp_error()}")
            # slirp4netns configured the tap device and the default route: now the routes
            # that keep the task off everything but the public internet.
            try:
                apply_policy(policy=self._policy, sandbox_pid=sandbox_pid, owner_fd=owner_fd)
            except EgressFilterError as error:
                raise EgressSetupError(str(error)) from error
        finally:
            os.close(ready_read)
            os.close(owner_fd)
            if ready_write >= 0:
                os.close(ready_write)

    def _wait_for_loopback(self, sandbox_pid: int) -> None:
        """bwrap reports the sandbox's pid before its child brings up the namespace's loopback
        (an address, then the link); slirp4netns, which also brings `lo` up, must not race it
        (bwrap then dies with "loopback: Failed RTM_NEWADDR", seen in CI). 127.0.0.0/8's local
        route appears in the namespace's routing table only once both steps are done."""
        deadline = time.monotonic() + SETUP_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{sandbox_pid}/net/fib_trie") as table:
                    if LOOPBACK_UP_MARK in table.read():
                        return
            except OSError as error:
                raise EgressSetupError("the sandbox exited while it was being set up") from error
            time.sleep(0.0005)
        raise EgressSetupError("timed out waiting for the sandbox's loopback")

    def _read_within(self, fd: int, size: int) -> bytes:
        deadline = time.monotonic() + SETUP_TIMEOUT_SECONDS
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if selector.select(max(0.0, deadline - time.monotonic())):
                    return os.read(fd, size)
        raise EgressSetupError("timed out setting up the sandbox's network")

    def _slirp_error(self) -> str:
        if self._slirp is None or self._slirp.stderr is None:
            return "not started"
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._slirp.wait(timeout=1)
        os.set_blocking(self._slirp.stderr.fileno(), False)
        try:
            text = (self._slirp.stderr.read() or b"").decode("utf-8", "replace").strip()
        except OSError:
            text = ""
        return text.splitlines()[-1] if text else "no message"

    def close(self) -> None:
        if self._slirp is not None:
            with contextlib.suppress(ProcessLookupError):
                self._slirp.send_signal(signal.SIGKILL)
            self._slirp.wait()
            if self._slirp.stderr is not None:
                self._slirp.stderr.close()
            self._slirp = None
