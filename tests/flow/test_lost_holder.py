"""A run that held a flow-control slot and lost its worker (a SIGKILL: its lease ended), against
real PostgreSQL: re-queued as the same attempt, it gets its slot back ahead of the runs that
waited behind it (due order), and the slot kept for it is free once that lease ends too.
The end to end case, with real workers and a real SIGKILL, is
tests/integration/test_flow_limits.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler_app.models import TaskExecution
from scheduler_app.services.flow_admission import flow_admit
from scheduler_app.services.losses import execution_lease_lost
from tests.flow.helpers import claim, claim_and_admit, ids, limited_task, make_waiting_due, queued

pytestmark = pytest.mark.django_db

ONE = {"concurrency": [{"key": "one", "max_running": 1}]}


def _lost_holder_and_its_waiter(tenant):
    """A holder admitted and a waiter behind it; then the holder's worker dies: its lease ends
    and the reaper re-queues it."""
    task = limited_task(tenant, **ONE)
    holder, waiter = queued(task, 2)
    assert ids(claim_and_admit([holder]).admitted) == {holder.id}
    assert claim_and_admit([waiter]).admitted == []
    TaskExecution.platform.filter(id=holder.id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert execution_lease_lost(execution_id=holder.id).requeued
    make_waiting_due([waiter])
    return holder, waiter


def test_a_requeued_holder_takes_its_slot_back_before_the_run_waiting_behind_it(tenant):
    holder, waiter = _lost_holder_and_its_waiter(tenant)
    requeued = TaskExecution.platform.get(id=holder.id)
    assert requeued.status == "queued" and requeued.worker_id == ""
    assert requeued.flow_holds and requeued.lease_expires_at > timezone.now()

    # The waiter comes first (its doorbell was ahead): the slot is kept for the holder.
    assert claim_and_admit([waiter], worker="w2").admitted == []
    assert TaskExecution.platform.get(id=waiter.id).waiting_for["running"] == 1

    # The holder is claimed, and the waiter admitted between that claim and the holder's own
    # admission still finds the slot taken.
    holder_claims = claim([holder], worker="w2")
    assert TaskExecution.platform.get(id=holder.id).flow_holds == requeued.flow_holds
    make_waiting_due([waiter])
    assert claim_and_admit([waiter], worker="w3").admitted == []
    assert ids(flow_admit(claims=holder_claims).admitted) == {holder.id}
    assert TaskExecution.platform.get(id=holder.id).status == "running"
    assert TaskExecution.platform.get(id=waiter.id).status == "pending"


def test_a_slot_kept_for_a_requeued_holder_is_free_once_that_lease_ends(tenant):
    holder, waiter = _lost_holder_and_its_waiter(tenant)
    # Nobody claimed the holder in time (no worker, its doorbell lost): the slot is free.
    TaskExecution.platform.filter(id=holder.id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert ids(claim_and_admit([waiter], worker="w2").admitted) == {waiter.id}
    # The holder, claimed at last, holds nothing of its own any more and waits its turn.
    holder_claims = claim([holder], worker="w2")
    assert TaskExecution.platform.get(id=holder.id).flow_holds is None
    assert flow_admit(claims=holder_claims).admitted == []
    assert TaskExecution.platform.get(id=holder.id).waiting_for["running"] == 1


def test_a_lost_run_without_slots_keeps_nothing(tenant):
    task = limited_task(tenant)
    (run,) = queued(task, 1)
    claim([run])
    TaskExecution.platform.filter(id=run.id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert execution_lease_lost(execution_id=run.id).requeued
    requeued = TaskExecution.platform.get(id=run.id)
    assert requeued.status == "queued" and requeued.lease_expires_at is None
