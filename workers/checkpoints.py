"""A run's checkpoints on the worker: what `context.checkpoint(state)` and
`context.resumed_from` reach (`handler_contract.base.Checkpoints`), and a shell task's
checkpoint file.

* The checkpoint of the run's earlier attempts is read once, when the handler first asks,
  and only when the claim statement saw one (`Claim.has_checkpoint`): a run without one
  costs no query, however its handler asks.
* A state is masked (the run's secrets, as in its log and result: secrets never rest in
  plaintext) and saved at once, in a transaction of its own (`checkpoint_save`).
* A shell task's file is saved when the attempt ends, however it ends (the handler reads it
  after the sandbox is gone), and at every lease renewal while it runs when it changed
  (`renewal_save`, from the run watcher): a worker SIGKILLed mid-run leaves what the file
  held at the last renewal, at most a third of a lease old. One stat per renewal, one read
  and one upsert only when the file changed.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from typing import Any

from handler_contract.base import CheckpointRefused, SecretMasker
from scheduler_app.services.checkpoints import (
    checkpoint_cap,
    checkpoint_for_chain,
    checkpoint_save,
    checkpoint_state_encode,
)

logger = logging.getLogger(__name__)

_UNREAD = object()


class RunCheckpoints:
    def __init__(
        self,
        *,
        tenant_id: Any,
        chain_id: uuid.UUID,
        execution_id: uuid.UUID,
        attempt: int,
        secrets: tuple[str, ...] = (),
        known_absent: bool = False,
    ) -> None:
        self.tenant_id = tenant_id
        self.chain_id = chain_id
        self.execution_id = execution_id
        self.attempt = attempt
        self.file_cap_bytes = checkpoint_cap()
        self._masker = SecretMasker(secrets)
        self._lock = threading.Lock()
        # The claim said the run has none: nothing to read (until this attempt saves one).
        self._loaded: Any = None if known_absent else _UNREAD
        self._watched: str | None = None
        self._watched_seen: tuple[int, int] | None = None
        self.saved_bytes: int | None = None

    # -- reads ------------------------------------------------------------------------
    def _row(self) -> Any:
        if self._loaded is _UNREAD:
            self._loaded = checkpoint_for_chain(tenant_id=self.tenant_id, chain_id=self.chain_id)
        return self._loaded

    def resumed_state(self) -> Any:
        row = self._row()
        return None if row is None else row.state

    def resumed_file(self) -> bytes | None:
        row = self._row()
        if row is None or row.file_data is None:
            return None
        return bytes(row.file_data)

    # -- writes -----------------------------------------------------------------------
    def save_state(self, state: Any) -> int:
        # Checked before masking: the size the handler is told about is its own state's.
        checkpoint_state_encode(state)
        masked = self._masker.data(state) if self._masker else state
        with self._lock:
            self._loaded = _UNREAD  # a later read sees this save
            self.saved_bytes = checkpoint_save(
                tenant_id=self.tenant_id,
                chain_id=self.chain_id,
                execution_id=self.execution_id,
                attempt=self.attempt,
                state=masked,
            )
        return self.saved_bytes

    def save_file(self, data: bytes) -> int:
        if self._masker:
            text = data.decode("utf-8", "surrogateescape")
            data = self._masker.text(text).encode("utf-8", "surrogateescape")
        with self._lock:
            self._loaded = _UNREAD
            self.saved_bytes = checkpoint_save(
                tenant_id=self.tenant_id,
                chain_id=self.chain_id,
                execution_id=self.execution_id,
                attempt=self.attempt,
                file_data=data,
            )
        return self.saved_bytes

    # -- a shell task's file, saved at lease renewals -------------------------------------
    def watch_file(self, path: str | None) -> None:
        with self._lock:
            self._watched = path
            self._watched_seen = _file_signature(path) if path else None

    def renewal_save(self) -> None:
        """From the run watcher's thread: save the watched file if it changed since."""
        path = self._watched
        if path is None:
            return
        seen = _file_signature(path)
        if seen is None or seen == self._watched_seen:
            return
        data = checkpoint_file_read(path, cap=self.file_cap_bytes)
        if data is None:
            return  # over the cap: the end of the attempt says so in the log
        try:
            self.save_file(data)
        except CheckpointRefused as refused:
            logger.info("checkpoint file of %s not kept: %s", self.execution_id, refused)
        self._watched_seen = seen


def _file_signature(path: str) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size


def checkpoint_file_read(path: str, *, cap: int) -> bytes | None:
    """The file's bytes, or None when it holds more than `cap` (only cap + 1 are read)."""
    try:
        with open(path, "rb") as file:
            data = file.read(cap + 1)
    except OSError:
        return b""
    return None if len(data) > cap else data
