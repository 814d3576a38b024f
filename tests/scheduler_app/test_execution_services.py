"""Claim, finish, retry, dead-letter and reap: the compare-and-swap transitions."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.finish import run_finish
from runs.lost import expired_leases_reap
from scheduler_app.models import ExecutionLoss, TaskExecution
from scheduler_app.monitoring.counters import read_runs_lost
from scheduler_app.services.claims import execution_claim, execution_renew_lease
from scheduler_app.services.executions import Outcome
from scheduler_app.services.losses import execution_lease_lost, execution_worker_lost
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task

pytestmark = pytest.mark.django_db

FAILED = Outcome(status="failed", error_message="boom", error_class="exit_code", transient=True)


@pytest.fixture
def task(tenant):
    return make_task(
        tenant,
        schedule={"type": "manual"},
        retry_policy={"max_attempts": 3, "backoff": "linear", "base_delay_seconds": 5},
    )


@pytest.fixture
def queued(task):
    # In a test transaction on_commit never runs: no doorbell, the test plays the worker.
    return task_trigger(task=task)


def test_only_one_of_two_claims_wins(queued):
    first = execution_claim(execution_id=queued.id, worker_id="w1", lease_seconds=30)
    second = execution_claim(execution_id=queued.id, worker_id="w2", lease_seconds=30)
    assert first is not None and second is None
    queued.refresh_from_db()
    assert queued.status == "running" and queued.worker_id == "w1"
    assert queued.claim_token == first.claim_token


def test_a_claim_of_an_unknown_execution_is_refused(db):
    assert execution_claim(execution_id=uuid.uuid4(), worker_id="w", lease_seconds=30) is None


def test_a_pending_row_in_the_future_cannot_be_claimed_early(queued):
    TaskExecution.platform.filter(id=queued.id).update(
        status="pending", scheduled_at=timezone.now() + timedelta(minutes=5)
    )
    assert execution_claim(execution_id=queued.id, worker_id="w", lease_seconds=30) is None


def test_success_is_recorded_with_result_and_log(queued):
    claim = execution_claim(execution_id=queued.id, worker_id="w1", lease_seconds=30)
    report = run_finish(
        execution_id=queued.id,
        claim_token=claim.claim_token,
        outcome=Outcome(status="success", result={"rows": 3}, exit_code=0),
        log_text="line 1\nline 2\n",
    )
    assert report.accepted and report.next_attempt_id is None
    queued.refresh_from_db()
    assert queued.status == "success" and queued.result == {"rows": 3}
    assert queued.completed_at is not None and queued.lease_expires_at is None


def test_the_last_progress_is_stored_by_the_finish_statement_itself(queued):
    """Whoever sees the run ended sees its last progress: they are one statement, so
    there is no moment when the row says success and has no progress yet."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    claim = execution_claim(execution_id=queued.id, worker_id="w1", lease_seconds=30)
    progress = {"percent": 100, "message": "step 4 of 4"}
    with CaptureQueriesContext(connection) as orm:
        report = run_finish(claim=claim, outcome=Outcome(status="success"), progress=progress)
    assert report.accepted
    assert not [q for q in orm.captured_queries if "progress" in q["sql"]]  # no second write
    queued.refresh_from_db()
    assert (queued.status, queued.progress) == ("success", progress)


def test_failure_schedules_the_next_attempt_as_a_pending_row_after_the_backoff(queued):
    claim = execution_claim(execution_id=queued.id, worker_id="w1", lease_seconds=30)
    before = timezone.now()
    report = run_finish(execution_id=queued.id, claim_token=claim.claim_token, outcome=FAILED)
    retry = TaskExecution.platform.get(id=report.next_attempt_id)
    assert retry.status == "pending" and retry.trigger == "retry" and retry.attempt == 2
    assert retry.root_execution_id == queued.id and retry.retry_of_id == queued.id
    # linear backoff, base 5 s, after attempt 1: 5 s
    assert (
        before + timedelta(seconds=4.5)
        <= retry.scheduled_at
        <= timezone.now() + timedelta(seconds=5.5)
    )


def test_the_last_failed_attempt_is_dead_lettered(task, queued):
    execution_id = queued.id
    for _ in range(3):
        TaskExecution.platform.filter(id=execution_id).update(scheduled_at=timezone.now())
        claim = execution_claim(execution_id=execution_id, worker_id="w", lease_seconds=30)
        report = run_finish(
            execution_id=execution_id, claim_token=claim.claim_token, outcome=FAILED
        )
        execution_id = report.next_attempt_id or execution_id
    attempts = TaskExecution.platform.filter(task=task).order_by("attempt")
    assert [a.attempt for a in attempts] == [1, 2, 3]
    assert [a.dead_lettered for a in attempts] == [False, False, True]
    assert report.dead_lettered


def test_permanent_errors_are_not_retried(queued):
    claim = execution_claim(execution_id=queued.id, worker_id="w", lease_seconds=30)
    report = run_finish(
        execution_id=queued.id,
        claim_token=claim.claim_token,
        outcome=Outcome(status="failed", error_class="http_4xx", transient=False),
    )
    assert report.dead_lettered and report.next_attempt_id is None
    assert TaskExecution.platform.count() == 1


def test_a_zombie_finish_is_rejected_by_the_claim_token(queued):
    claim = execution_claim(execution_id=queued.id, worker_id="w1", lease_seconds=30)
    stale_token = uuid.uuid4()
    report = run_finish(
        execution_id=queued.id, claim_token=stale_token, outcome=Outcome(status="success")
    )
    assert not report.accepted
    queued.refresh_from_db()
    assert queued.status == "running" and queued.claim_token == claim.claim_token


def test_lease_renewal_fails_once_the_claim_is_gone(queued):
    claim = execution_claim(execution_id=queued.id, worker_id="w1", lease_seconds=30)
    assert execution_renew_lease(
        execution_id=queued.id, claim_token=claim.claim_token, lease_seconds=30
    )
    assert not execution_renew_lease(
        execution_id=queued.id, claim_token=uuid.uuid4(), lease_seconds=30
    )


def _claim_and_expire(execution_id, worker_id="w1"):
    claim = execution_claim(execution_id=execution_id, worker_id=worker_id, lease_seconds=30)
    TaskExecution.platform.filter(id=execution_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    return claim


def test_an_expired_lease_requeues_the_same_attempt_once_by_many_reapers(queued):
    claim = _claim_and_expire(queued.id)
    reports = [execution_lease_lost(execution_id=queued.id) for _ in range(5)]
    assert sum(report.accepted for report in reports) == 1
    assert expired_leases_reap() == 0
    queued.refresh_from_db()
    # The same row, the same attempt, back in the queue; no retry spent.
    assert (queued.status, queued.attempt, queued.claim_token, queued.worker_id) == (
        "queued",
        1,
        None,
        "",
    )
    assert not TaskExecution.platform.filter(retry_of_id=queued.id).exists()
    (loss,) = ExecutionLoss.platform.filter(execution_id=queued.id)
    assert (loss.outcome, loss.attempt, loss.worker_id) == ("requeued", 1, "w1")
    # The worker that lost its lease (a zombie) cannot finish it any more ...
    late = run_finish(
        execution_id=queued.id, claim_token=claim.claim_token, outcome=Outcome(status="success")
    )
    assert not late.accepted
    # ... and the next claim is a new one, which finishes the run once.
    again = execution_claim(execution_id=queued.id, worker_id="w2", lease_seconds=30)
    assert again is not None and again.claim_token != claim.claim_token
    assert run_finish(
        execution_id=queued.id, claim_token=again.claim_token, outcome=Outcome(status="success")
    ).accepted
    assert not run_finish(
        execution_id=queued.id, claim_token=claim.claim_token, outcome=Outcome(status="success")
    ).accepted
    attempts = TaskExecution.platform.filter(task=queued.task).values_list("attempt", "status")
    assert list(attempts) == [(1, "success")]


def test_a_loss_past_worker_lost_requeues_fails_the_attempt_and_retries(queued, settings):
    settings.FLEET = {**settings.FLEET, "LOST_REQUEUES": 2}
    for _ in range(3):
        _claim_and_expire(queued.id)
        assert expired_leases_reap() == 1
    queued.refresh_from_db()
    assert queued.status == "failed" and queued.error_class == "worker_lost"
    (retry,) = TaskExecution.platform.filter(retry_of_id=queued.id)
    assert (retry.attempt, retry.status) == (2, "pending")
    outcomes = ExecutionLoss.platform.filter(execution_id=queued.id).order_by("lost_at", "id")
    assert [loss.outcome for loss in outcomes] == ["requeued", "requeued", "failed"]


def test_a_single_attempt_task_whose_host_dies_is_requeued_not_dead_lettered(tenant):
    task = make_task(tenant, schedule={"type": "manual"}, retry_policy={"max_attempts": 1})
    run = task_trigger(task=task)
    claim = execution_claim(execution_id=run.id, worker_id="w-dead", lease_seconds=30)
    report = execution_worker_lost(
        execution_id=run.id, claim_token=claim.claim_token, worker_id="w-dead", reason="gone"
    )
    assert report.requeued and not report.finish.dead_lettered
    run.refresh_from_db()
    assert run.status == "queued" and not run.dead_lettered
    # A reaper holding the old claim finds nothing to do a second time.
    assert not execution_worker_lost(
        execution_id=run.id, claim_token=claim.claim_token, worker_id="w-dead", reason="gone"
    ).accepted


@pytest.mark.usefixtures("private_broker")
def test_each_loss_is_counted_once_for_the_metrics(
    queued, settings, django_capture_on_commit_callbacks
):
    settings.FLEET = {**settings.FLEET, "LOST_REQUEUES": 1}
    before = read_runs_lost()
    for _ in range(2):
        _claim_and_expire(queued.id)
        with django_capture_on_commit_callbacks(execute=True):
            assert expired_leases_reap() == 1
            assert expired_leases_reap() == 0
    after = read_runs_lost()
    for outcome in ("requeued", "failed"):
        key = (str(queued.tenant_id), queued.queue, outcome)
        assert after.get(key, 0) - before.get(key, 0) == 1, outcome
