"""A shell task's checkpoint file: ``$SCHEDULER_CHECKPOINT_FILE``.

The command finds there what the previous attempt of its run left (empty on a first start)
and may rewrite it whenever it likes (in place: ``> "$SCHEDULER_CHECKPOINT_FILE"``; it is a
bind mount, so renaming another file over it fails). When the attempt ends, however it ends
(success, failure, timeout, cancel, preemption), what the file holds is the run's checkpoint
for its next attempt, at most CHECKPOINT_MAX_BYTES (a bigger file is not kept, and the log
says so). While the run goes, the worker also saves it at each lease renewal when it changed
(`workers.checkpoints`), which is what a SIGKILLed worker leaves.

The file lives on the worker's disk for the attempt (a private temp file, mode 0600, owned by
the sandbox's user), bound into the sandbox at /task/.checkpoint: the sandbox's own /task is a
tmpfs that vanishes with it, before the worker could read it. Its size is bounded by the
task's file_size_bytes rlimit, like any file the task writes; only CHECKPOINT_MAX_BYTES + 1
bytes of it are ever read. No checkpoint store (a unit test's context): no file, no variable.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

from handler_contract.base import CheckpointRefused, HandlerContext, LogSink

CHECKPOINT_ENV = "SCHEDULER_CHECKPOINT_FILE"
SANDBOX_CHECKPOINT_PATH = "/task/.checkpoint"
FILE_PREFIX = "task-run-checkpoint-"


def _signature(path: str) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size


class CheckpointFile:
    """The host file of one attempt: created with the run's last checkpoint, saved and
    removed at its end (`close`)."""

    def __init__(self, ctx: HandlerContext, log: LogSink, identity: tuple[int, int] | None):
        self.ctx = ctx
        self.log = log
        self.path: str | None = None
        self._resumed: bytes | None = None
        self._created: tuple[int, int] | None = None
        store = ctx.checkpoints
        if store is None:
            return
        self._resumed = store.resumed_file()
        # A root worker's sandboxes run as another user, who must reach the file.
        root = os.geteuid() == 0
        fd, path = tempfile.mkstemp(prefix=FILE_PREFIX, dir="/tmp" if root else None)  # noqa: S108
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(self._resumed or b"")
            if identity is not None and root:
                os.chown(path, *identity)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        self.path = path
        self._created = _signature(path)
        store.watch_file(path)

    def in_use(self) -> bool:
        """Whether the task takes part in checkpointing: it resumed from a checkpoint, or has
        written the file. Only such a task is sent SIGTERM when its worker is preempted (it
        can save and exit); another keeps running until the drain's deadline."""
        if self.path is None:
            return False
        return bool(self._resumed) or _signature(self.path) != self._created

    def environment(self, *, sandboxed: bool) -> dict[str, str]:
        if self.path is None:
            return {}
        return {CHECKPOINT_ENV: SANDBOX_CHECKPOINT_PATH if sandboxed else self.path}

    def bwrap_binds(self) -> list[tuple[str, str]]:
        return [] if self.path is None else [(self.path, SANDBOX_CHECKPOINT_PATH)]

    def close(self) -> None:
        """Save what the file holds (when it changed), then remove it."""
        store, path = self.ctx.checkpoints, self.path
        if store is None or path is None:
            return
        store.watch_file(None)
        try:
            with open(path, "rb") as file:
                data = file.read(store.file_cap_bytes + 1)
        except OSError:
            data = b""
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
            self.path = None
        if len(data) > store.file_cap_bytes:
            self.log.write(
                "system",
                f"checkpoint file not kept: over {store.file_cap_bytes:,} bytes "
                "(CHECKPOINT_MAX_BYTES)",
            )
            return
        if data == (self._resumed or b""):
            return  # unchanged (or empty on a first start): nothing to write
        try:
            size = store.save_file(data)
        except CheckpointRefused as refused:
            self.log.write("system", f"checkpoint file not kept: {refused}")
            return
        except Exception as error:  # a database blip must not lose the run's outcome
            self.log.write("system", f"checkpoint file not kept: {type(error).__name__}")
            return
        self.log.write("system", f"checkpoint file kept ({size:,} bytes)")
