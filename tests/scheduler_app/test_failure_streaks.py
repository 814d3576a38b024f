"""A task's failure streak (`consecutive_failures`), kept where a run's end is settled: a run
counts once when it ends failed for good (its last attempt, or the dead-letter queue), a
success resets it, a batch of finishes moves it in one statement, and two workers ending
failures of one task at once cross the runbook's threshold once between them."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from alerting.tasks import RECOVERY_NOTICE_TASK, TASK_RUNBOOK_TASK
from project.celery import app
from runs.finish import run_finish, runs_finish
from scheduler_app.models import TaskDefinition
from scheduler_app.services.claims import execution_claim
from scheduler_app.services.executions import Ended, Outcome
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task
from tests.processes import wait_until

pytestmark = pytest.mark.django_db


@pytest.fixture
def runbook_queue(settings):
    """Alerting's messages go to a queue of this test's own, where no worker listens."""
    queue = f"streak-test-{uuid.uuid4().hex[:8]}"
    settings.ALERTS = {**settings.ALERTS, "QUEUE": queue}
    return queue


def queued_tasks(queue: str) -> list[tuple[str, list]]:
    """(task name, args) of every message waiting in `queue`, taken off it."""
    found = []
    with app.connection_for_read() as conn:
        simple = conn.SimpleQueue(queue)
        try:
            while True:
                try:
                    message = simple.get(timeout=0.2)
                except simple.Empty:
                    return found
                found.append((message.headers["task"], message.payload[0]))
                message.ack()
        finally:
            simple.close()


def claimed(task: TaskDefinition, *, worker: str = "w1"):
    execution = task_trigger(task=task)
    return execution_claim(execution_id=execution.id, worker_id=worker, lease_seconds=30)


def outcome(status: str, *, transient: bool = False) -> Outcome:
    return Outcome(status=status, transient=transient, error_class="boom")


def finish(claim, status: str, *, transient: bool = False):
    return run_finish(claim=claim, outcome=outcome(status, transient=transient))


def streak(task: TaskDefinition) -> int:
    return TaskDefinition.platform.values_list("consecutive_failures", flat=True).get(id=task.id)


def test_a_run_counts_once_across_its_attempts_and_a_success_resets(tenant):
    task = make_task(tenant, name="flaky", retry_policy={"max_attempts": 2})
    first = finish(claimed(task), "failed", transient=True)
    assert first.next_attempt_id is not None
    assert streak(task) == 0  # attempt 1 of 2 failed: the run is not over
    second = execution_claim(execution_id=first.next_attempt_id, worker_id="w1", lease_seconds=30)
    last = finish(second, "failed", transient=True)
    assert last.dead_lettered and streak(task) == 1  # its last attempt: one failed run
    finish(claimed(task), "timed_out")  # a permanent failure: dead-lettered at attempt 1
    assert streak(task) == 2
    finish(claimed(task), "success")
    assert streak(task) == 0


def test_a_dead_lettered_run_counts(tenant):
    task = make_task(tenant, name="doomed", retry_policy={"max_attempts": 3})
    report = finish(claimed(task), "failed", transient=False)
    assert report.dead_lettered and streak(task) == 1


def test_a_cancelled_run_neither_counts_nor_resets(tenant):
    task = make_task(tenant, name="cancelled", retry_policy={"max_attempts": 1})
    finish(claimed(task), "failed")
    finish(claimed(task), "cancelled")
    assert streak(task) == 1


def test_a_batch_moves_each_task_in_one_statement(tenant):
    noisy = make_task(tenant, name="noisy", retry_policy={"max_attempts": 1})
    quiet = make_task(tenant, name="quiet", retry_policy={"max_attempts": 1})
    finish(claimed(quiet), "failed")
    ended = [Ended(claim=claimed(noisy), outcome=outcome("failed")) for _ in range(3)]
    ended += [
        Ended(claim=claimed(quiet), outcome=outcome("failed")),
        Ended(claim=claimed(quiet), outcome=outcome("success")),
        Ended(claim=claimed(quiet), outcome=outcome("failed")),
    ]
    with CaptureQueriesContext(connection) as queries:
        runs_finish(ended)
    table = TaskDefinition._meta.db_table
    counting = [q["sql"] for q in queries if f"UPDATE {table}" in q["sql"]]
    assert len(counting) == 1, counting
    assert (streak(noisy), streak(quiet)) == (3, 1)


def test_plain_successes_of_a_task_that_is_not_failing_write_nothing(tenant):
    task = make_task(tenant, name="fine")
    ended = [Ended(claim=claimed(task), outcome=outcome("success")) for _ in range(3)]
    with CaptureQueriesContext(connection) as queries:
        runs_finish(ended)
    table = TaskDefinition._meta.db_table
    assert not [q for q in queries if table in q["sql"] and "UPDATE" in q["sql"]]


def test_the_threshold_crossing_hands_the_runbook_over_once(
    tenant, runbook_queue, django_capture_on_commit_callbacks
):
    task = make_task(
        tenant,
        name="crossing",
        retry_policy={"max_attempts": 1},
        policy={"pause_after_failures": 2},
    )
    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(4):
            finish(claimed(task), "failed")
    runbooks = [args for name, args in queued_tasks(runbook_queue) if name == TASK_RUNBOOK_TASK]
    assert len(runbooks) == 1
    task_id, _execution_id, failures = runbooks[0]
    assert (task_id, failures) == (str(task.id), 2)


def test_the_first_success_after_failures_hands_the_recovery_notice_over_once(
    tenant, runbook_queue, django_capture_on_commit_callbacks
):
    task = make_task(
        tenant,
        name="recovering",
        retry_policy={"max_attempts": 1},
        notifications={"on_recovery": ["email://ops@example.com"]},
    )
    with django_capture_on_commit_callbacks(execute=True):
        finish(claimed(task), "failed")
        finish(claimed(task), "failed")
        finish(claimed(task), "success")
        finish(claimed(task), "success")
    notices = [args for name, args in queued_tasks(runbook_queue) if name == RECOVERY_NOTICE_TASK]
    assert len(notices) == 1 and notices[0][1] == 2


@pytest.mark.django_db(transaction=True)
def test_two_workers_failing_one_task_at_once_cross_the_threshold_once(tenant, runbook_queue):
    """The first worker's finish holds the task row until it commits; the second's counting
    statement waits on that lock (seen in pg_locks, not slept for), then counts on top of
    it: 1 -> 2 crosses, 2 -> 3 does not. A read-modify-write in Python would see 1 twice."""
    task = make_task(
        tenant,
        name="contended",
        retry_policy={"max_attempts": 1},
        policy={"pause_after_failures": 2},
    )
    finish(claimed(task), "failed")
    first, second = claimed(task, worker="w1"), claimed(task, worker="w2")
    first_counted, release = threading.Event(), threading.Event()
    backends: dict[str, int] = {}
    errors: list[BaseException] = []

    def worker(name: str, claim, *, hold: bool) -> None:
        try:
            backends[name] = connections["default"].cursor().connection.info.backend_pid
            with transaction.atomic():
                run_finish(claim=claim, outcome=outcome("failed"))
                if hold:
                    first_counted.set()
                    release.wait(timeout=60)
        except BaseException as error:  # surfaced by the test thread
            errors.append(error)
        finally:
            connections.close_all()

    one = threading.Thread(target=worker, args=("w1", first), kwargs={"hold": True})
    one.start()
    assert first_counted.wait(timeout=60)
    two = threading.Thread(target=worker, args=("w2", second), kwargs={"hold": False})
    two.start()

    def second_waits_on_a_lock() -> bool:
        if "w2" not in backends:
            return False
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", [backends["w2"]]
            )
            return cursor.fetchone()[0] > 0

    wait_until(second_waits_on_a_lock, timeout=30, message="the second finish to wait")
    release.set()
    one.join(timeout=60)
    two.join(timeout=60)
    assert not errors, errors
    assert streak(task) == 3
    runbooks = [args for name, args in queued_tasks(runbook_queue) if name == TASK_RUNBOOK_TASK]
    assert len(runbooks) == 1 and runbooks[0][2] == 2
