"""The DAG engine's chores in the beat leader's housekeeping (scheduler_app.housekeeping):
each is one bounded round, and each catches up on what a process that died left undone."""

from __future__ import annotations

from datetime import datetime

from dags.engine.mapping import map_joins_reconcile
from dags.services.approvals import approval_waits_expire
from dags.services.backfills import backfills_advance
from dags.services.events import event_waits_expire, events_prune
from dags.services.undecided import undecided_nodes_decide
from scheduler_app.housekeeping import Chore, chore_register


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


def _without_clock(step):
    def run(now: datetime) -> None:
        step()

    run.__name__ = step.__name__
    return run
