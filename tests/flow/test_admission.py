"""The admission at the claim, against real PostgreSQL (and Redis for the cancel signal): each
strategy, pools and their resize, leases, a Redis emptied mid-run, the rate window with an
injected clock, and two admitters racing for one key."""

from __future__ import annotations

import random
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from scheduler_app.models import FlowRateStart, TaskExecution
from scheduler_app.services.firing import due_pending_promote
from scheduler_app.services.pools import pool_create, pool_update
from scheduler_app.services.run_signals import cancel_key
from tests.flow.helpers import (
    QUEUE,
    claim,
    claim_and_admit,
    finish,
    ids,
    limited_task,
    make_waiting_due,
    queued,
)

pytestmark = pytest.mark.django_db

PER_CUSTOMER = {"concurrency": [{"key": "{{ parameters.customer_id }}", "max_running": 2}]}


def per_customer(strategy: str, key: str = "{{ parameters.customer_id }}") -> list[dict]:
    return [{"key": key, "max_running": 1, "strategy": strategy}]


def test_queue_admits_up_to_max_running_and_the_rest_wait_in_due_order(tenant):
    task = limited_task(tenant, **PER_CUSTOMER)
    runs = queued(task, 5, customer_id="42")
    verdict = claim_and_admit(runs)
    assert ids(verdict.admitted) == {runs[0].id, runs[1].id}
    assert ids(verdict.waiting) == {run.id for run in runs[2:]}
    waiting = TaskExecution.platform.get(id=runs[2].id)
    assert waiting.status == "pending"
    assert waiting.scheduled_at == runs[2].scheduled_at  # its place in the line is kept
    assert waiting.waiting_for == {"kind": "concurrency", "key": "42", "running": 2, "max": 2}
    assert waiting.claim_token is None and waiting.flow_wake_at is not None

    # Still full: a second look lets nobody in.
    make_waiting_due(runs[2:])
    assert claim_and_admit(runs[2:]).admitted == []
    # One ends: the oldest waiting one takes its slot, the others keep waiting.
    finish(runs[:1])
    make_waiting_due(runs[2:])
    verdict = claim_and_admit(runs[2:])
    assert ids(verdict.admitted) == {runs[2].id}
    assert TaskExecution.platform.get(id=runs[2].id).waiting_for is None


def test_keys_are_independent(tenant):
    task = limited_task(tenant, **PER_CUSTOMER)
    a = queued(task, 3, customer_id="a")
    b = queued(task, 3, due=timezone.now() + timedelta(seconds=1), customer_id="b")
    verdict = claim_and_admit(a + b)
    assert len(verdict.admitted) == 4 and len(verdict.waiting) == 2


def test_a_run_without_limits_is_not_looked_at(tenant):
    from scheduler_app.services.flow_admission import claim_needs_flow

    plain = limited_task(tenant, name="plain")
    (claimed,) = claim(queued(plain, 1))
    assert not claim_needs_flow(claimed)


@pytest.mark.parametrize(
    ("strategy", "status"), [("skip", "skipped"), ("cancel_newest", "cancelled")]
)
def test_skip_and_cancel_newest_end_the_newcomer_with_the_reason(tenant, strategy, status):
    task = limited_task(
        tenant,
        concurrency=[
            {"key": "{{ parameters.customer_id }}", "max_running": 1, "strategy": strategy}
        ],
    )
    first, newcomer = queued(task, 2, customer_id="42")
    assert ids(claim_and_admit([first]).admitted) == {first.id}
    verdict = claim_and_admit([newcomer])
    ((ended, ended_status, reason),) = verdict.ended
    assert ended.execution.id == newcomer.id and ended_status == status
    assert "'42'" in reason and "1 of 1" in reason


def test_the_worker_finishes_an_ended_newcomer_through_the_run_end(tenant):
    from workers.runner import executions_run

    task = limited_task(
        tenant,
        concurrency=[
            {"key": "k-{{ parameters.customer_id }}", "max_running": 1, "strategy": "skip"}
        ],
    )
    first, newcomer = queued(task, 2, customer_id="42")
    claim_and_admit([first])
    executions_run(execution_ids=[str(newcomer.id)], worker_id="w2", queue=QUEUE)
    row = TaskExecution.platform.get(id=newcomer.id)
    assert row.status == "skipped" and row.error_class == "flow_control"
    assert "k-42" in row.error_message


def test_cancel_in_progress_cancels_the_running_one_and_the_newest_waits_for_its_slot(
    tenant, redis_client
):
    task = limited_task(
        tenant,
        concurrency=[
            {
                "key": "{{ parameters.customer_id }}",
                "max_running": 1,
                "strategy": "cancel_in_progress",
            }
        ],
    )
    running, newcomer = queued(task, 2, customer_id="42")
    claim_and_admit([running])
    verdict = claim_and_admit([newcomer])
    assert ids(verdict.waiting) == {newcomer.id}
    assert redis_client.get(cancel_key(str(running.id))) is not None
    row = TaskExecution.platform.get(id=newcomer.id)
    assert row.waiting_for["cancelling"] == [str(running.id)]
    # The cancelled run ends (its worker kills it): the newcomer takes the slot.
    finish([running], status="cancelled")
    make_waiting_due([newcomer])
    assert ids(claim_and_admit([newcomer]).admitted) == {newcomer.id}


def test_dag_nodes_share_a_pool_and_a_resize_takes_effect_at_once(tenant):
    pool_create(tenant=tenant, name="warehouse", slots=3)
    heavy = limited_task(tenant, name="load", pool="warehouse", pool_slots=2)
    light = limited_task(tenant, name="check", pool="warehouse")
    h = queued(heavy, 2)
    l = queued(light, 2, due=timezone.now() + timedelta(seconds=1))  # noqa: E741
    verdict = claim_and_admit(h + l)
    # 2 + 1 of 3 slots: the second heavy run waits; the second light one too (3 of 3).
    assert ids(verdict.admitted) == {h[0].id, l[0].id}
    row = TaskExecution.platform.get(id=h[1].id)
    # What the pool held when the run was turned away (the first heavy run's 2 slots).
    assert row.waiting_for == {"kind": "pool", "key": "warehouse", "running": 2, "max": 3}
    pool = pool_update(pool=tenant_pool(tenant), changes={"slots": 6})
    assert pool.slots == 6
    make_waiting_due(h[1:] + l[1:])
    assert ids(claim_and_admit(h[1:] + l[1:]).admitted) == {h[1].id, l[1].id}


def tenant_pool(tenant):
    from scheduler_app.selectors.pools import pool_get

    return pool_get(tenant=tenant, name="warehouse")


def test_a_slot_held_past_its_lease_is_free(tenant):
    """A SIGKILLed worker renews nothing: its run's slot is free once the lease ends, even
    before the reaper fails the run."""
    task = limited_task(tenant, concurrency=[{"key": "one", "max_running": 1}])
    lost, next_run = queued(task, 2)
    claim_and_admit([lost])
    assert claim_and_admit([next_run]).admitted == []
    TaskExecution.platform.filter(id=lost.id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    make_waiting_due([next_run])
    assert ids(claim_and_admit([next_run]).admitted) == {next_run.id}


def test_redis_emptied_mid_run_changes_no_count(tenant, redis_client):
    task = limited_task(tenant, concurrency=[{"key": "one", "max_running": 1}])
    holder, other = queued(task, 2)
    claim_and_admit([holder])
    redis_client.flushdb()  # what a Redis restarted empty has
    assert claim_and_admit([other]).admitted == []


def test_a_rate_limit_is_never_exceeded_in_any_window_and_loses_nothing(tenant):
    """3 a minute, 40 runs arriving at random over ~5 minutes, admitted by a clock the test
    drives: no 60 s span holds more than 3 starts, and every run starts in the end."""
    task = limited_task(tenant, rate_limit=[{"key": "api", "limit": 3, "per": "minute"}])
    start = timezone.now()
    runs = queued(task, 40, due=start - timedelta(seconds=1))
    rng = random.Random(29)
    clock = start
    waiting = list(runs)
    while waiting and clock < start + timedelta(hours=1):
        batch = rng.sample(waiting, min(len(waiting), rng.randint(1, 5)))
        TaskExecution.platform.filter(id__in=[r.id for r in batch]).update(status="queued")
        verdict = claim_and_admit(batch, now=clock)
        finish([c.execution for c in verdict.admitted])
        admitted = ids(verdict.admitted)
        waiting = [r for r in waiting if r.id not in admitted]
        wakes = TaskExecution.platform.filter(id__in=[r.id for r in waiting]).values_list(
            "flow_wake_at", flat=True
        )
        # The next look: a random moment, never later than the earliest window opening.
        wakes = [wake for wake in wakes if wake is not None]
        clock = min([clock + timedelta(seconds=rng.uniform(0.5, 30)), *wakes]) + timedelta(
            microseconds=1
        )
    starts = sorted(
        FlowRateStart.objects.filter(key__endswith=":api").values_list("started_at", flat=True)
    )
    assert len(starts) == 40 and not waiting
    for index, began in enumerate(starts):
        in_window = [s for s in starts[index:] if s < began + timedelta(seconds=60)]
        assert len(in_window) <= 3


def test_a_waiting_run_is_promoted_only_once_its_wake_time_comes(tenant):
    task = limited_task(tenant, concurrency=[{"key": "one", "max_running": 1}])
    holder, waiter = queued(task, 2, due=timezone.now() - timedelta(seconds=5))
    claim_and_admit([holder, waiter])
    wake = TaskExecution.platform.get(id=waiter.id).flow_wake_at
    now = timezone.now()
    early = due_pending_promote(now=wake - timedelta(milliseconds=1), limit=100)
    assert str(waiter.id) not in {bell.execution_id for bell in early}
    due = due_pending_promote(now=max(wake, now), limit=100)
    assert str(waiter.id) in {bell.execution_id for bell in due}


@pytest.mark.django_db(transaction=True)
def test_two_admitters_racing_for_one_key_never_exceed_it(tenant):
    task = limited_task(tenant, concurrency=[{"key": "one", "max_running": 3}])
    runs = queued(task, 40)
    halves = [runs[0::2], runs[1::2]]
    barrier = threading.Barrier(2)
    admitted: list[set] = [set(), set()]

    def admitter(index: int) -> None:
        try:
            barrier.wait()
            for part in (halves[index][k : k + 4] for k in range(0, 20, 4)):
                admitted[index] |= ids(claim_and_admit(part, worker=f"w{index}").admitted)
        finally:
            connection.close()

    threads = [threading.Thread(target=admitter, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(admitted[0] | admitted[1]) == 3
    held = TaskExecution.platform.filter(status="running", flow_holds__isnull=False).count()
    assert held == 3


def test_a_finish_wakes_as_many_of_its_keys_oldest_waiters_as_slots_came_free(tenant, settings):
    from handler_contract.base import HandlerOutcome
    from runs.finish import runs_finish
    from scheduler_app.services.executions import Ended

    settings.FLOW_RECHECK_SECONDS = 60  # no waiter comes back by its recheck meanwhile
    task = limited_task(tenant, concurrency=[{"key": "one", "max_running": 1}])
    holder, *waiters = queued(task, 4)
    verdict = claim_and_admit([holder, *waiters])
    (admitted,) = verdict.admitted
    before = timezone.now()
    runs_finish([Ended(claim=admitted, outcome=HandlerOutcome(status="success"))])
    wakes = dict(
        TaskExecution.platform.filter(id__in=[w.id for w in waiters]).values_list(
            "id", "flow_wake_at"
        )
    )
    woken = [w.id for w in waiters if wakes[w.id] <= timezone.now()]
    assert woken == [waiters[0].id]  # the oldest, and only one: one slot came free
    assert wakes[waiters[0].id] >= before
    # Handed the slot: queued (rung once the finish commits), the others still waiting.
    statuses = dict(
        TaskExecution.platform.filter(id__in=[w.id for w in waiters]).values_list("id", "status")
    )
    assert [statuses[w.id] for w in waiters] == ["queued", "pending", "pending"]
    assert ids(claim_and_admit(waiters[:1]).admitted) == {waiters[0].id}


def test_only_the_head_of_a_keys_line_comes_back_at_a_recheck(tenant):
    """A finish hands slots on by itself; the recheck (a fallback) brings back as many of a
    key's oldest waiters as its maximum, not the whole line to be turned away again."""
    task = limited_task(tenant, concurrency=[{"key": "one", "max_running": 1}])
    holder, *waiters = queued(task, 4, due=timezone.now() - timedelta(seconds=5))
    claim_and_admit([holder, *waiters])
    TaskExecution.platform.filter(id__in=[w.id for w in waiters]).update(
        flow_wake_at=timezone.now() - timedelta(seconds=1)
    )
    promoted = {bell.execution_id for bell in due_pending_promote(now=timezone.now(), limit=100)}
    assert promoted == {str(waiters[0].id)}


def test_a_pool_made_larger_hands_its_new_slots_to_its_oldest_waiters(tenant):
    pool_create(tenant=tenant, name="warehouse", slots=1)
    task = limited_task(tenant, name="load", pool="warehouse")
    runs = queued(task, 3)
    assert ids(claim_and_admit(runs).admitted) == {runs[0].id}
    pool_update(pool=tenant_pool(tenant), changes={"slots": 2})
    statuses = dict(
        TaskExecution.platform.filter(id__in=[r.id for r in runs[1:]]).values_list("id", "status")
    )
    assert [statuses[r.id] for r in runs[1:]] == ["queued", "pending"]
