"""The DAG engine's chores in the beat leader's housekeeping (scheduler_app.housekeeping):
each is one bounded round, and each catches up on what a process that died left undone."""

from __future__ import annotations

import logging
import threading
from datetime import datetime

from django.db import connection

from dags.engine.mapping import map_joins_reconcile
from dags.services.approvals import approval_waits_expire
from dags.services.backfills import backfills_advance
from dags.services.events import event_waits_expire, events_prune
from dags.services.sensor_rounds import sensors_poke
from dags.services.timers import sleeps_wake
from dags.services.undecided import undecided_nodes_decide
from scheduler_app.housekeeping import Chore, chore_register

logger = logging.getLogger(__name__)


def chores_register() -> None:
    # map_joins_reconcile: complete fan-out joins whose chord callback was lost;
    # undecided_nodes_decide: conditions whose process died before deciding them.
    for name, step in (
        ("dag-map-joins", map_joins_reconcile),
        ("dag-undecided-nodes", undecided_nodes_decide),
        ("dag-backfills", backfills_advance),
        ("dag-event-waits", event_waits_expire),
        ("dag-approval-waits", approval_waits_expire),
        ("dag-events-prune", events_prune),
    ):
        chore_register(Chore(name, _without_clock(step)))
    chore_register(Chore("dag-sleeps", lambda now: sleeps_wake(now=now)))
    chore_register(Chore("dag-sensors", _sensor_round_start))


_sensor_round: threading.Thread | None = None


def _sensor_round_start(now: datetime) -> None:
    """Pokes wait on the network: they run on a thread of their own, one round at a time,
    so the firing loop that runs the chores never waits for a tenant's target."""
    global _sensor_round
    if _sensor_round is not None and _sensor_round.is_alive():
        return
    _sensor_round = threading.Thread(target=_sensor_round_run, name="dag-sensors", daemon=True)
    _sensor_round.start()


def _sensor_round_run() -> None:
    try:
        sensors_poke()
    except Exception:
        logger.exception("sensor round failed; the next housekeeping round tries again")
    finally:
        connection.close()  # this thread's own connection


def _without_clock(step):
    def run(now: datetime) -> None:
        step()

    run.__name__ = step.__name__
    return run
