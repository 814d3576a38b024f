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
    """Publish every doorbell over one producer connection. Returns how many were sent.

    Fair dispatch first: a tenant's doorbells beyond its in-flight cap in a tier are not
    sent but put back to `pending` (see `scheduler_app.fairness`). Then sticky routing may
    send a retry to the worker that ran its previous attempt (see `workers.routing`).
    """
    from project.celery import app  # models never import the Celery app; dispatch does
    from scheduler_app.fairness import fair_admit
    from workers.routing import route

    doorbells = fair_admit(list(doorbells))
    # The tier a doorbell was admitted under, kept in the message even when sticky routing
    # sends it to a worker's own queue, so the worker releases the right fairness slot.
    tiers = {bell.execution_id: bell.queue for bell in doorbells}
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
                headers={
                    "tenant_id": bell.tenant_id,
                    "tier": tiers.get(bell.execution_id, bell.queue),
                },
            )
            sent += 1
    return sent
