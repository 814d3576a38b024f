"""The per-run files bwrap copies into a sandbox (the upstream results, the seccomp filter),
as memfds: nothing of a run is written to the worker's disk.
"""

from __future__ import annotations

import contextlib
import os

from .profile import NETWORK_NONE, SANDBOX_WORKDIR
from .seccomp import socket_filter_program


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)  # not CLOEXEC: pass_fds hands it to bwrap
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


class SandboxFiles:
    """The per-run files bwrap copies into the sandbox, as memfds (nothing on disk).

    bwrap reads each descriptor to its end, so they cannot be shared between runs.
    """

    def __init__(self, *, network: str, upstream: bytes | None) -> None:
        self._entries: list[tuple[str, str, int]] = []  # (bwrap option, destination, fd)
        try:
            if upstream is not None:
                self._add("--file", f"{SANDBOX_WORKDIR}/upstream_results.json", upstream)
            self.seccomp_fd: int | None = None
            program = socket_filter_program() if network == NETWORK_NONE else None
            if program is not None:
                self.seccomp_fd = _memfd("seccomp", program)
        except BaseException:
            self.close()
            raise

    def _add(self, option: str, destination: str, data: bytes) -> None:
        self._entries.append((option, destination, _memfd(destination, data)))

    def bwrap_options(self) -> list[str]:
        options: list[str] = []
        for option, destination, fd in self._entries:
            options += [option, str(fd), destination]
        if self.seccomp_fd is not None:
            options += ["--seccomp", str(self.seccomp_fd)]
        return options

    def fds(self) -> tuple[int, ...]:
        fds = [fd for _option, _destination, fd in self._entries]
        if self.seccomp_fd is not None:
            fds.append(self.seccomp_fd)
        return tuple(fds)

    def close(self) -> None:
        for fd in self.fds():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._entries = []
        self.seccomp_fd = None

    def __enter__(self) -> SandboxFiles:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
