"""Batch doorbells, run in this process against the real PostgreSQL and Redis: one claim for
the batch, each run once, plain successes finished together, everything else one by one, and
a slow handler never holds the rest of its batch back."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import timedelta

import pytest
import redis
from django.conf import settings as django_settings
from django.utils import timezone

from project.celery import app
from scheduler_app.models import ExecutionLog, TaskExecution
from tests.factories import make_queued_runs, make_task
from workers.runner import execution_batch_run

pytestmark = pytest.mark.django_db(transaction=True)

WORKER = "batch-test@host"
SHELL_TRUE = {"type": "shell", "command": ["true"]}


def _broker() -> tuple[redis.Redis, str]:
    prefix = django_settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix") or ""
    return redis.Redis.from_url(app.conf.broker_url), prefix


def _queued(task, count: int, **parameters) -> list[TaskExecution]:
    """Queued runs of `task`, due a second ago, on a queue of this test's own and with no
    doorbell: the test plays the worker that received their batch (a live worker of another
    test in this process must not take them, nor the doorbells a spill rings)."""
    return make_queued_runs(
        task,
        count,
        queue=f"batch-test-{uuid.uuid4().hex[:8]}",
        due=timezone.now() - timedelta(seconds=1),
        parameters=dict(parameters) or None,
    )


def _rung(queue: str) -> list[str]:
    """The execution ids doorbells wait for in `queue` (single or batch messages)."""
    client, prefix = _broker()
    ids = []
    for message in client.lrange(prefix + queue, 0, -1):
        envelope = json.loads(message)
        args = json.loads(base64.b64decode(envelope["body"]))[0]
        ids.extend(args[0] if isinstance(args[0], list) else args)
    return ids


def _ids(runs) -> list[str]:
    return [str(run.id) for run in runs]


def test_a_batch_runs_each_execution_once_and_finishes_successes_together(tenant):
    task = make_task(
        tenant,
        name="echoes",
        schedule={"type": "manual"},
        handler={"type": "python", "callable": "echo"},
    )
    runs = _queued(task, 5, word="hi")
    summary = execution_batch_run(
        execution_ids=[*_ids(runs), str(runs[0].id)],  # a duplicated id claims nothing more
        worker_id=WORKER,
        tenant_id=str(tenant.id),
        queue=runs[0].queue,
    )
    assert summary == "batch of 6: 5 success, 1 duplicate"
    done = TaskExecution.platform.filter(id__in=[run.id for run in runs])
    assert {row.status for row in done} == {"success"}
    for row in done:
        assert row.worker_id == WORKER and row.lease_expires_at is None
        assert row.scheduled_at <= row.started_at <= row.completed_at
        assert row.result == {"word": "hi"}
    # Delivered again (a redelivery of the same message): nothing runs twice.
    again = execution_batch_run(execution_ids=_ids(runs), worker_id=WORKER)
    assert again == "batch of 5: 5 duplicate"
    assert TaskExecution.platform.filter(task=task).count() == 5


def test_failures_are_finished_one_by_one_with_their_retry(tenant):
    good = make_task(tenant, name="good", schedule={"type": "manual"})
    bad = make_task(
        tenant,
        name="bad",
        schedule={"type": "manual"},
        handler={"type": "python", "callable": "fail"},
        retry_policy={"max_attempts": 2, "backoff": "fixed", "base_delay_seconds": 60},
    )
    ok_runs, bad_runs = _queued(good, 2), _queued(bad, 1)
    summary = execution_batch_run(
        execution_ids=[str(ok_runs[0].id), str(bad_runs[0].id), str(ok_runs[1].id)],
        worker_id=WORKER,
    )
    assert summary == "batch of 3: 2 success, 1 failed"
    failed = TaskExecution.platform.get(id=bad_runs[0].id)
    assert failed.status == "failed" and "failing on purpose" in failed.error_message
    # Its real start is recorded, not the batch's claim: it ran after the first success did.
    first = TaskExecution.platform.get(id=ok_runs[0].id)
    assert first.started_at < failed.started_at <= failed.completed_at
    retry = TaskExecution.platform.get(retry_of_id=failed.id)
    assert retry.status == "pending" and retry.attempt == 2
    assert set(
        TaskExecution.platform.filter(id__in=[r.id for r in ok_runs]).values_list(
            "status", flat=True
        )
    ) == {"success"}


@pytest.mark.needs_os_tool("bubblewrap")
def test_a_batch_run_that_logs_keeps_its_log(tenant):
    task = make_task(
        tenant,
        name="talker",
        schedule={"type": "manual"},
        handler={"type": "shell", "command": ["echo", "hello-from-batch"]},
    )
    runs = _queued(task, 2)
    execution_batch_run(execution_ids=_ids(runs), worker_id=WORKER)
    for run in runs:
        log = ExecutionLog.platform.get(execution_id=run.id)
        assert "hello-from-batch" in log.text and log.tenant_id == tenant.id


def test_a_slow_handler_hands_back_the_runs_its_batch_has_not_started(tenant, settings):
    settings.WORKER = {**settings.WORKER, "BATCH_SPILL_SECONDS": 0.3}
    settings.FAIR_INFLIGHT_PER_TENANT = 0
    slow = make_task(
        tenant,
        name="slow",
        schedule={"type": "manual"},
        handler={"type": "python", "callable": "sleep"},
        parameters={"seconds": 1.5},
    )
    quick = make_task(tenant, name="quick", schedule={"type": "manual"})
    quick_first, slow_run, rest = _queued(quick, 1), _queued(slow, 1), _queued(quick, 3)
    for run in [*quick_first, *slow_run]:  # one batch: one queue
        run.queue = rest[0].queue
    TaskExecution.platform.filter(id__in=[r.id for r in [*quick_first, *slow_run]]).update(
        queue=rest[0].queue
    )
    summary = execution_batch_run(
        execution_ids=[*_ids(quick_first), *_ids(slow_run), *_ids(rest)], worker_id=WORKER
    )
    # The quick run before the slow one was recorded by the spill, well before the slow one
    # ended; the three after it were given back unstarted and rung again, one doorbell each.
    assert summary == "batch of 5: 2 success"
    first = TaskExecution.platform.get(id=quick_first[0].id)
    slow_done = TaskExecution.platform.get(id=slow_run[0].id)
    assert first.status == slow_done.status == "success"
    assert first.updated_at < slow_done.completed_at
    given_back = TaskExecution.platform.filter(id__in=[run.id for run in rest])
    for row in given_back:
        assert row.status == "queued"
        assert row.worker_id == "" and row.claim_token is None and row.started_at is None
    assert sorted(_rung(rest[0].queue)) == sorted(_ids(rest))
    # Whoever takes them next runs them.
    assert execution_batch_run(execution_ids=_ids(rest), worker_id="other@host") == (
        "batch of 3: 3 success"
    )


def test_a_cancel_requested_while_queued_stops_that_run_only(tenant):
    from scheduler_app.services.run_signals import cancel_request

    task = make_task(tenant, name="cancellable", schedule={"type": "manual"})
    runs = _queued(task, 3)
    cancel_request(execution_id=str(runs[1].id))
    summary = execution_batch_run(execution_ids=_ids(runs), worker_id=WORKER)
    statuses = dict(TaskExecution.platform.filter(task=task).values_list("id", "status").iterator())
    assert statuses[runs[1].id] == "cancelled"
    assert statuses[runs[0].id] == statuses[runs[2].id] == "success"
    assert summary == "batch of 3: 2 success, 1 cancelled"


def test_quotas_judge_a_batch_run_by_run(tenant):
    # One at a time, so a concurrency limit of 1 lets the whole batch through...
    tenant.max_concurrent_runs = 1
    # ...while the hourly limit counts each run: the third of the hour is deferred.
    tenant.max_runs_per_hour = 2
    tenant.save(update_fields=["max_concurrent_runs", "max_runs_per_hour"])
    task = make_task(tenant, name="counted", schedule={"type": "manual"})
    runs = _queued(task, 3)
    summary = execution_batch_run(execution_ids=_ids(runs), worker_id=WORKER)
    assert summary == "batch of 3: 2 success, 1 deferred"
    statuses = [TaskExecution.platform.get(id=run.id).status for run in runs]
    assert statuses == ["success", "success", "pending"]
    deferred = TaskExecution.platform.get(id=runs[2].id)
    assert deferred.claim_token is None and deferred.scheduled_at > runs[2].scheduled_at


def test_a_batch_over_the_concurrency_quota_goes_back_whole_and_tells_once(tenant, caplog):
    """Each run back to pending (claim let go, later time), the hour's count taken back, the
    admins told once, one line at INFO for the batch (each run's at DEBUG)."""
    from scheduler_app.models import AuditEntry
    from scheduler_app.services.quotas import tenant_usage

    tenant.max_concurrent_runs = 1
    tenant.save(update_fields=["max_concurrent_runs"])
    task = make_task(tenant, name="crowded", schedule={"type": "manual"})
    holder = _queued(task, 1)[0]
    TaskExecution.platform.filter(id=holder.id).update(status="running", worker_id="other@host")
    runs = _queued(task, 3)
    hour_before = tenant_usage(tenant=tenant).runs_this_hour
    with caplog.at_level("INFO", logger="workers.runner"):
        summary = execution_batch_run(execution_ids=_ids(runs), worker_id=WORKER)
    assert summary == "batch of 3: 3 deferred"
    for run in runs:
        row = TaskExecution.platform.get(id=run.id)
        assert row.status == "pending" and row.claim_token is None and row.worker_id == ""
        assert row.scheduled_at > run.scheduled_at and row.started_at is None
    assert tenant_usage(tenant=tenant).runs_this_hour == hour_before
    assert AuditEntry.platform.filter(tenant=tenant, action="quota.exceeded").count() == 1
    lines = [r.getMessage() for r in caplog.records if r.name == "workers.runner"]
    infos = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
    assert "3 claimed runs deferred: tenant over max_concurrent_runs (3)" in lines
    assert sum("deferred" in line for line in infos) == 1


def test_a_batch_that_keeps_moving_still_hands_back_what_waits_too_long(tenant, settings):
    # No handler runs a whole look (0.3 s), but the batch as a whole passes four looks.
    settings.WORKER = {**settings.WORKER, "BATCH_SPILL_SECONDS": 0.3}
    settings.FAIR_INFLIGHT_PER_TENANT = 0
    task = make_task(
        tenant,
        name="steady",
        schedule={"type": "manual"},
        handler={"type": "python", "callable": "sleep"},
        parameters={"seconds": 0.2},
    )
    runs = _queued(task, 9)
    summary = execution_batch_run(execution_ids=_ids(runs), worker_id=WORKER)
    statuses = [TaskExecution.platform.get(id=run.id).status for run in runs]
    done = statuses.count("success")
    assert summary == f"batch of 9: {done} success"
    assert 4 <= done < 9
    # The runs handed back are the last ones, queued again with a doorbell each.
    assert statuses == ["success"] * done + ["queued"] * (9 - done)
    assert sorted(_rung(runs[0].queue)) == sorted(_ids(runs[done:]))


@pytest.mark.needs_os_tool("bubblewrap")
def test_shell_runs_run_in_lanes_and_a_slow_one_spills_only_what_has_not_started(tenant, settings):
    # Two lanes: the slow run holds one, the quick runs pass through the other meanwhile;
    # once the slow run has been seen running at two looks, the batch spills.
    settings.WORKER = {**settings.WORKER, "BATCH_SPILL_SECONDS": 0.3, "BATCH_PARALLEL": 2}
    settings.FAIR_INFLIGHT_PER_TENANT = 0
    slow = make_task(
        tenant,
        name="slow-shell",
        schedule={"type": "manual"},
        handler={"type": "shell", "command": ["sleep", "1.5"]},
    )
    quick = make_task(tenant, name="quick-shell", schedule={"type": "manual"}, handler=SHELL_TRUE)
    slow_run, quick_runs = _queued(slow, 1), _queued(quick, 5)
    queue = quick_runs[0].queue
    TaskExecution.platform.filter(id=slow_run[0].id).update(queue=queue)  # one batch: one queue
    summary = execution_batch_run(
        execution_ids=[*_ids(slow_run), *_ids(quick_runs)], worker_id=WORKER
    )
    rows = {
        row.id: row
        for row in TaskExecution.platform.filter(id__in=[r.id for r in [*slow_run, *quick_runs]])
    }
    slow_done = rows[slow_run[0].id]
    assert slow_done.status == "success"
    ran = [run for run in quick_runs if rows[run.id].status == "success"]
    given_back = [run for run in quick_runs if rows[run.id].status == "queued"]
    assert len(ran) + len(given_back) == len(quick_runs)
    # The first quick run took the second lane at once: it ran beside the slow one, and its
    # success was recorded without waiting for it.
    assert quick_runs[0] in ran
    assert rows[quick_runs[0].id].completed_at < slow_done.completed_at
    assert summary == f"batch of 6: {1 + len(ran)} success"
    # What had not started went back, rung once each; whoever takes it runs it once.
    for run in given_back:
        row = rows[run.id]
        assert row.worker_id == "" and row.claim_token is None and row.started_at is None
    assert sorted(_rung(queue)) == sorted(_ids(given_back))
    if given_back:
        again = execution_batch_run(execution_ids=_ids(given_back), worker_id="other@host")
        assert again == f"batch of {len(given_back)}: {len(given_back)} success"
    assert TaskExecution.platform.filter(task__in=[slow, quick]).count() == 6
    assert set(
        TaskExecution.platform.filter(task__in=[slow, quick]).values_list("status", flat=True)
    ) == {"success"}


def test_a_batch_runs_side_by_side_only_when_every_handler_only_waits():
    from workers.batch_lanes import batch_width

    assert batch_width(["shell"] * 10, parallel=4, room=100) == 4
    assert batch_width(["shell", "http"], parallel=4, room=100) == 2
    # The tenant's concurrency quota has room for 3 more.
    assert batch_width(["shell"] * 10, parallel=4, room=3) == 3
    # A python handler runs in the worker's own process, under its GIL: one by one.
    assert batch_width(["shell", "python", "shell"], parallel=4, room=100) == 1
    assert batch_width([], parallel=4, room=100) == 1


@pytest.mark.needs_os_tool("bubblewrap")
def test_when_every_lane_is_held_the_batch_hands_back_what_has_not_started(tenant, settings):
    settings.WORKER = {**settings.WORKER, "BATCH_SPILL_SECONDS": 0.3, "BATCH_PARALLEL": 2}
    settings.FAIR_INFLIGHT_PER_TENANT = 0
    slow = make_task(
        tenant,
        name="slow-shell",
        schedule={"type": "manual"},
        handler={"type": "shell", "command": ["sleep", "1.5"]},
    )
    quick = make_task(tenant, name="quick-shell", schedule={"type": "manual"}, handler=SHELL_TRUE)
    slow_runs, quick_runs = _queued(slow, 2), _queued(quick, 3)
    queue = quick_runs[0].queue
    TaskExecution.platform.filter(id__in=[r.id for r in slow_runs]).update(queue=queue)
    summary = execution_batch_run(
        execution_ids=[*_ids(slow_runs), *_ids(quick_runs)], worker_id=WORKER
    )
    # Both lanes held by the slow runs for a whole look: the quick runs, not started, went
    # back and were rung again, one doorbell each.
    assert summary == "batch of 5: 2 success"
    assert {TaskExecution.platform.get(id=run.id).status for run in slow_runs} == {"success"}
    for run in quick_runs:
        row = TaskExecution.platform.get(id=run.id)
        assert row.status == "queued"
        assert row.worker_id == "" and row.claim_token is None and row.started_at is None
    assert sorted(_rung(queue)) == sorted(_ids(quick_runs))
    assert execution_batch_run(execution_ids=_ids(quick_runs), worker_id="other@host") == (
        "batch of 3: 3 success"
    )


def test_a_celery_run_cancelled_while_queued_sends_nothing(tenant, settings):
    """The celery handler does not look at the cancel event itself: the runner must not
    start it (the message it would send cannot be taken back)."""
    from scheduler_app.services.run_signals import cancel_request

    target = f"cancel-test-{uuid.uuid4().hex[:8]}"
    settings.CELERY_HANDLER_TASKS = [f"reports.tasks.refresh@{target}"]
    task = make_task(
        tenant,
        name="sends-a-celery-task",
        schedule={"type": "manual"},
        handler={"type": "celery", "task": "reports.tasks.refresh", "queue": target},
    )
    runs = _queued(task, 2)
    cancel_request(execution_id=str(runs[0].id))
    summary = execution_batch_run(execution_ids=_ids(runs), worker_id=WORKER)
    assert TaskExecution.platform.get(id=runs[0].id).status == "cancelled"
    assert TaskExecution.platform.get(id=runs[1].id).status == "success"
    client, prefix = _broker()
    assert client.llen(prefix + target) == 1  # the run not cancelled sent its one message
    client.delete(prefix + target)
    assert sorted(summary.split(": ", 1)[1].split(", ")) == ["1 cancelled", "1 success"]
