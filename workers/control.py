"""Steering a running execution from outside its worker: cancel requests over Redis.

A key rather than pub/sub: a request made while the run is between claim and its first
poll (or while the worker reconnects to Redis) is not lost, and any worker can see it.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings

from scheduler_app.redis_client import get_redis, redis_key

logger = logging.getLogger(__name__)

CANCEL_TTL_SECONDS = 24 * 3600


def _cancel_key(execution_id: str) -> str:
    return redis_key(f"cancel:{execution_id}")


def cancel_request(*, execution_id: str) -> None:
    get_redis().set(_cancel_key(execution_id), "1", ex=CANCEL_TTL_SECONDS)


def cancel_requested(*, execution_id: str) -> bool:
    return bool(get_redis().exists(_cancel_key(execution_id)))


def _abandon_key(claim_token: str) -> str:
    return redis_key(f"abandon:{claim_token}")


def abandon_request(*, claim_tokens: list[str]) -> None:
    """Tell the holders of these claims (released by a draining worker) to stop now."""
    if claim_tokens:
        pipe = get_redis().pipeline(transaction=False)
        for token in claim_tokens:
            pipe.set(_abandon_key(token), "1", ex=3600)
        pipe.execute()


def stop_requested(*, execution_id: str, claim_token: str) -> bool:
    """A cancel of the execution, or the abandonment of this claim of it."""
    return bool(get_redis().exists(_cancel_key(execution_id), _abandon_key(claim_token)))


class CancelWatcher:
    """Polls the cancel key while a handler runs and sets the handler's cancel event.

    The handlers watch that event (the shell handler every 50 ms) and kill the process
    group, so a cancel lands within poll interval + 50 ms."""

    def __init__(
        self, *, execution_id: str, claim_token: str, cancel_event: threading.Event
    ) -> None:
        self._execution_id = execution_id
        self._claim_token = claim_token
        self._event = cancel_event
        self._stop = threading.Event()
        self._interval = settings.FLEET["CANCEL_POLL_SECONDS"]
        self._thread = threading.Thread(target=self._run, name="cancel-watcher", daemon=True)

    def __enter__(self) -> CancelWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._event.is_set():
            try:
                if stop_requested(execution_id=self._execution_id, claim_token=self._claim_token):
                    logger.info("execution %s: cancel requested", self._execution_id)
                    self._event.set()
                    return
            except Exception:  # Redis blip: the next poll tries again
                logger.exception("cancel poll of %s failed", self._execution_id)
            if self._stop.wait(self._interval):
                return
