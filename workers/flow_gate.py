"""The worker's side of flow control: of the runs a batch claimed and the quota let through,
the ones under concurrency keys, pools or rate limits pass the admission
(`scheduler_app.services.flow_admission`, one transaction for the batch); the others never
come here, so a run without limits pays one dict test.

What the admission sends back to wait was written by it (pending, `waiting_for`); here its
start is undone in Redis as for a quota deferral. What a strategy ends (`skip`,
`cancel_newest`) is finished through the run's end (`runs.finish`), so a DAG node whose run
was skipped or cancelled settles as it would for any other end.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from handler_contract.base import HandlerOutcome
from runs.finish import runs_finish
from scheduler_app.services.executions import Ended
from scheduler_app.services.flow_admission import claim_needs_flow, flow_admit
from workers.batch import Item
from workers.run_ledger import RunLedger

logger = logging.getLogger(__name__)


def flow_gate(items: Sequence[Item], *, ledger: RunLedger, now: datetime) -> list[Item]:
    """The items that may start now, in their order."""
    limited = [item for item in items if claim_needs_flow(item.claim)]
    if not limited:
        return list(items)
    verdict = flow_admit(claims=[item.claim for item in limited], now=now)
    admitted = {claim.execution.id for claim in verdict.admitted}
    held_back = [item for item in limited if item.claim.execution.id not in admitted]
    if held_back:
        ledger.unstart(
            [item.claim for item in held_back], at=now, counted=[item.counted for item in held_back]
        )
    if verdict.waiting:
        logger.info("%d run(s) wait on a flow-control limit", len(verdict.waiting))
    if verdict.ended:
        runs_finish(
            [
                Ended(
                    claim=claim,
                    outcome=HandlerOutcome(
                        status=status,
                        error_message=message,
                        error_class="flow_control",
                        transient=False,
                    ),
                )
                for claim, status, message in verdict.ended
            ]
        )
    return [
        item
        for item in items
        if not claim_needs_flow(item.claim) or item.claim.execution.id in admitted
    ]
