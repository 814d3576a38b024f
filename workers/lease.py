"""Keeps a running execution's lease alive from a side thread while its handler runs."""

from __future__ import annotations

import logging
import threading
import time
import uuid

from django.db import close_old_connections, connection

from scheduler_app.services.executions import execution_renew_lease

logger = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews every lease/3. Stops renewing after `give_up_after` seconds (a handler that
    ignored its timeout): the lease then expires and the reaper takes the attempt over.
    If the claim is lost (the reaper already failed this attempt), `lost` is set and the
    run is cancelled, so a zombie never keeps working on an attempt it no longer owns."""

    def __init__(
        self,
        *,
        execution_id: str,
        claim_token: uuid.UUID,
        lease_seconds: float,
        give_up_after: float,
        on_lost: threading.Event,
    ) -> None:
        self._execution_id = execution_id
        self._claim_token = claim_token
        self._lease_seconds = lease_seconds
        self._deadline = time.monotonic() + give_up_after
        self._on_lost = on_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        interval = max(0.2, self._lease_seconds / 3)
        try:
            while not self._stop.wait(interval):
                if time.monotonic() > self._deadline:
                    logger.warning(
                        "execution %s overran its timeout; lease left to expire", self._execution_id
                    )
                    return
                try:
                    close_old_connections()
                    renewed = execution_renew_lease(
                        execution_id=self._execution_id,
                        claim_token=self._claim_token,
                        lease_seconds=self._lease_seconds,
                    )
                except Exception:  # a database blip: try again next round
                    logger.exception("lease renewal of %s failed", self._execution_id)
                    continue
                if not renewed:
                    logger.warning("execution %s: claim lost, stopping the run", self._execution_id)
                    self._on_lost.set()
                    return
        finally:
            connection.close()
