"""In-process continuation: the worker that finished a DAG node runs one ready successor
itself, right after the finish commits, instead of ringing its doorbell and waiting for the
broker to hand it to some pool process (the broker round trip, the worker's consumer loop
and the hand-over to a child are most of a chain's inter-node latency).

How it stays safe:
* The worker task opens a slot around a run (`continuing`); only code running inside it can
  be handed a node, so the reaper, the API or the beat never "continue" anything.
* The engine nominates at most one node per finished run, of the tier the worker took the
  run from, while the slot's time budget lasts; every other ready node rings its doorbell.
* The nominated execution is an ordinary `queued` row written in the finishing transaction;
  the slot learns its id only after that transaction commits. The worker then claims it with
  the usual compare-and-swap, so it runs once, with a lease, cancel watcher and quotas like
  any run. If the worker dies between the commit and the claim, the row is a queued row
  whose doorbell was never rung: the beat's reconciler republishes it after
  SCHEDULER_REQUEUE_GRACE, as for a lost doorbell. A worker killed while running it leaves
  a running row with a lease: the reaper fails it as `worker_lost` and retries it.
* The budget (DAG_CONTINUATION_SECONDS from the first run the message brought) keeps one
  chain from holding a pool process forever while other work waits in the broker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction

_local = threading.local()


@dataclass
class _Slot:
    tier: str
    deadline: float
    # Set in the finishing transaction (one node per run at most; reset between runs) ...
    nominated: bool = False
    # ... and filled after it commits.
    ready: list[str] = field(default_factory=list)


def _slot() -> _Slot | None:
    return getattr(_local, "slot", None)


def continuation_offer(*, queue: str) -> bool:
    """May the node about to be dispatched (an execution of tier `queue`) run in this process
    right after the current transaction commits? True at most once per run of this process."""
    slot = _slot()
    if slot is None or slot.nominated or slot.ready or queue != slot.tier:
        return False
    if time.monotonic() > slot.deadline:
        return False
    slot.nominated = True
    return True


def continuation_accept(execution_id: str) -> None:
    """The nominated execution's row is written in this transaction: hand it over once the
    transaction commits (a rollback never runs on_commit, so nothing is handed over)."""
    slot = _slot()
    assert slot is not None
    transaction.on_commit(lambda: slot.ready.append(execution_id))


@contextmanager
def continuing(*, tier: str | None) -> Iterator[Callable[[], str | None]]:
    """Around a worker's run of one message: yields `next_execution()`, the id of a node
    this process should run now (or None). Nesting is a no-op (the outer slot serves)."""
    budget = settings.DAG_CONTINUATION_SECONDS
    if _slot() is not None or not tier or budget <= 0:
        yield lambda: None
        return
    slot = _Slot(tier=tier, deadline=time.monotonic() + budget)
    _local.slot = slot

    def next_execution() -> str | None:
        slot.nominated = False
        return slot.ready.pop(0) if slot.ready else None

    try:
        yield next_execution
    finally:
        _local.slot = None
