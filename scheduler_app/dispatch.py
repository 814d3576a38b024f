"""Ringing the doorbell: publish execution ids to their tier queue.

A broker message carries only the execution id and the tenant (for routing); the
worker reads everything else from the database when it claims, so a forged, replayed
or stale message can at most ring a bell that the claim refuses.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

logger = logging.getLogger(__name__)

RUN_EXECUTION_TASK = "workers.run_execution"


@dataclass(frozen=True)
class Doorbell:
    execution_id: str
    tenant_id: str
    queue: str


def publish(doorbells: Iterable[Doorbell]) -> int:
    """Publish every doorbell over one producer connection. Returns how many were sent."""
    from project.celery import app  # models never import the Celery app; dispatch does
    from workers.routing import route

    doorbells = list(doorbells)
    try:
        doorbells = route(doorbells)
    except Exception:  # stickiness is an optimisation: never let it stop a publish
        logger.exception("sticky routing failed; publishing to the tier queues")
    sent = 0
    with app.producer_or_acquire() as producer:
        for bell in doorbells:
            app.send_task(
                RUN_EXECUTION_TASK,
                args=[bell.execution_id],
                kwargs={},
                queue=bell.queue,
                routing_key=bell.queue,
                producer=producer,
                headers={"tenant_id": bell.tenant_id},
            )
            sent += 1
    return sent
