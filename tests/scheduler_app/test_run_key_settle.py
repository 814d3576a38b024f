"""Settling a keyed run's idempotency key (services.run_keys) against other runs of the key
in the database: the success it is skipped for, or the running one it waits for."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from scheduler_app.models import TaskExecution
from scheduler_app.services.claims import Claim
from scheduler_app.services.losses import execution_lease_lost
from scheduler_app.services.run_keys import execution_key_settle
from tests.factories import make_task
from workers.execute import _idempotent_outcome

pytestmark = pytest.mark.django_db

KEY_TEMPLATE = "{{parameters.region}}:{{scheduled_date}}"


def _running(task, *, key: str = "") -> TaskExecution:
    now = timezone.now()
    return TaskExecution.objects.create(
        task=task,
        tenant=task.tenant,
        scheduled_at=now,
        status="running",
        started_at=now,
        claim_token=uuid.uuid4(),
        lease_expires_at=now + timedelta(seconds=60),
        parameters={"region": "eu"},
        idempotency_key=key,
    )


def _settle(execution: TaskExecution):
    execution.refresh_from_db()
    return execution_key_settle(
        execution=execution, task=execution.task, claim_token=execution.claim_token
    )


@pytest.fixture
def task(tenant):
    return make_task(
        tenant,
        name="keyed",
        schedule={"type": "manual"},
        parameters={"region": "eu"},
        idempotency_key=KEY_TEMPLATE,
    )


def test_a_run_waits_for_a_running_run_of_its_key_then_is_skipped_if_it_succeeded(task):
    first, second = _running(task), _running(task)
    settled = _settle(first)
    assert settled.running_elsewhere is None and settled.succeeded_before is None
    waiting = _settle(second)
    assert waiting.running_elsewhere == first.id
    second.refresh_from_db()
    assert second.idempotency_key == ""  # a waiter is not recorded: others do not wait for it
    TaskExecution.platform.filter(id=first.id).update(status="success", completed_at=timezone.now())
    after = _settle(second)
    assert (after.running_elsewhere, after.succeeded_before) == (None, first.id)


def test_when_the_running_run_fails_one_waiter_runs_and_the_others_wait_for_it(task):
    first, second, third = _running(task), _running(task), _running(task)
    _settle(first)
    assert _settle(second).running_elsewhere == first.id
    assert _settle(third).running_elsewhere == first.id
    TaskExecution.platform.filter(id=first.id).update(status="failed", completed_at=timezone.now())
    runs = _settle(third)
    assert (runs.running_elsewhere, runs.succeeded_before) == (None, None)
    assert _settle(second).running_elsewhere == third.id


def test_two_retries_carrying_the_key_do_not_wait_for_each_other(task):
    key = _settle(_running(task)).key
    TaskExecution.platform.filter(idempotency_key=key).update(status="failed")
    # Retries carry their fire's key from creation, so both are recorded before they settle.
    one, two = _running(task, key=key), _running(task, key=key)
    assert _settle(one).running_elsewhere == two.id
    assert _settle(two).running_elsewhere is None  # `one` took its key off while it waits
    assert _settle(one).running_elsewhere == two.id


def test_a_running_run_whose_lease_expired_is_waited_for_until_a_reaper_ends_it(task):
    """Past its lease a run may still finish (a stalled worker, a batch's success not yet
    recorded): running the key again then could record two successes. A reaper ends it."""
    stale, fresh = _running(task), _running(task)
    _settle(stale)
    TaskExecution.platform.filter(id=stale.id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert _settle(fresh).running_elsewhere == stale.id
    reaped = execution_lease_lost(execution_id=stale.id)
    assert reaped.accepted
    assert _settle(fresh).running_elsewhere is None
    # The reaped run's finish, had its worker been only stalled, is refused (its claim is gone):
    # it is back in the queue, the same attempt, for a new claim.
    stale.refresh_from_db()
    assert stale.status == "queued" and stale.claim_token is None


def test_a_run_of_the_key_that_succeeds_while_the_key_is_read_is_seen(task):
    """The running run's finish does not take the key's lock: it may commit at any instant of
    the settle. Whenever it lands, the settling run sees it running (and waits) or succeeded
    (and is skipped); it never sees neither and runs the key a second time."""
    first, second = _running(task), _running(task)
    _settle(first)
    second.refresh_from_db()
    executions = TaskExecution._meta.db_table
    finished = []

    def first_finishes_after_each_read_of_the_key(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        reads_the_key = sql.startswith("SELECT") and f'"{executions}"."idempotency_key" =' in sql
        if reads_the_key and not finished:
            finished.append(sql)
            TaskExecution.platform.filter(id=first.id).update(
                status="success", completed_at=timezone.now()
            )
        return result

    with connection.execute_wrapper(first_finishes_after_each_read_of_the_key):
        settled = execution_key_settle(
            execution=second, task=second.task, claim_token=second.claim_token
        )
    assert finished, "the settle read no run of the key"
    assert first.id in (settled.running_elsewhere, settled.succeeded_before)


def test_a_run_whose_wait_for_its_key_is_cancelled_ends_cancelled_unstarted(task):
    """The wait is cut by the run's cancel event (a cancel, a lost claim): the run ends
    `cancelled`; its handler never runs."""
    first, second = _running(task), _running(task)
    _settle(first)
    second.refresh_from_db()
    cancel = threading.Event()
    cancel.set()
    claim = Claim(
        execution=second,
        task=second.task,
        claim_token=second.claim_token,
        claimed_at=timezone.now(),
    )
    outcome = _idempotent_outcome(claim, cancel)
    assert outcome is not None and outcome.status == "cancelled"
