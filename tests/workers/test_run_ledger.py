"""The worker's per-run Redis bookkeeping (`workers.run_ledger.RunLedger`), against the real
Redis: a start counts each run once (alone or in a batch, folded or not), its undo takes back
exactly that, an end counts what the run did, and Redis being away fails no run."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import redis
from django.utils import timezone

from scheduler_app.fleet.registry import counters_read
from scheduler_app.live_logs import live_logs_redis, log_stream_key
from scheduler_app.redis_client import get_redis
from scheduler_app.redis_coalesce import CoalescedWrites
from scheduler_app.ringing.fairness import _drained_keys, _inflight_key
from scheduler_app.services.claims import Claim
from scheduler_app.services.log_quota import log_bytes_used
from scheduler_app.services.quotas import tenant_usage
from scheduler_app.services.retry_budget import retry_budget_usage
from scheduler_app.services.run_signals import abandon_request, cancel_request
from tests.factories import make_queued_runs, make_task
from workers.live_logs import LiveLogSink, live_tails_close
from workers.run_ledger import RunLedger

pytestmark = pytest.mark.django_db


@pytest.fixture
def worker_id() -> str:
    return f"ledger-test-{uuid.uuid4().hex[:8]}@host"


def _claims(tenant, count: int, *, claimed_at=None) -> list[Claim]:
    task = make_task(tenant, name=f"ledger-{uuid.uuid4().hex[:6]}", schedule={"type": "manual"})
    runs = make_queued_runs(
        task,
        count,
        queue=f"ledger-test-{uuid.uuid4().hex[:8]}",
        due=timezone.now() - timedelta(seconds=1),
    )
    now = timezone.now()
    return [
        Claim(execution=run, task=task, claim_token=uuid.uuid4(), claimed_at=claimed_at or now)
        for run in runs
    ]


def _pipe():
    return get_redis().pipeline(transaction=False)


def _executions_this_minute() -> int:
    return retry_budget_usage(now=timezone.now())["executions_this_minute"]


@pytest.mark.parametrize("folded", [False, True], ids=["one pipeline", "batch, folded"])
def test_a_start_counts_each_run_once_and_its_undo_takes_exactly_that_back(
    tenant, worker_id, folded
):
    claims = _claims(tenant, 3)
    ledger = RunLedger(worker_id)
    budget_before = _executions_this_minute()

    started = ledger.start(claims, _pipe(), writes=CoalescedWrites() if folded else None)

    assert counters_read(worker_id).active_runs == 3
    assert tenant_usage(tenant=tenant).runs_this_hour == 3
    assert _executions_this_minute() - budget_before == 3
    assert started.quota(tenant.id) == (3, None)  # the hour's runs after these; no seconds yet
    assert [started.stop_requested(i) for i in range(3)] == [False, False, False]

    ledger.unstart(claims, at=started.at, counted=[started.counted[tenant.id]] * 3)

    assert counters_read(worker_id).active_runs == 0
    assert tenant_usage(tenant=tenant).runs_this_hour == 0
    assert _executions_this_minute() == budget_before


def test_an_undo_without_counts_leaves_the_hour_to_the_deferral(tenant, worker_id):
    """Without counts an undo leaves the hour's count alone (whoever passes them takes it back,
    once)."""
    claims = _claims(tenant, 1)
    ledger = RunLedger(worker_id)
    started = ledger.start(claims, _pipe())
    ledger.unstart(claims, at=started.at)
    assert counters_read(worker_id).active_runs == 0
    assert tenant_usage(tenant=tenant).runs_this_hour == 1


def test_a_start_sees_each_runs_own_stop_signal(tenant, worker_id):
    cancelled, abandoned, plain = _claims(tenant, 3)
    cancel_request(execution_id=str(cancelled.execution.id))
    abandon_request(claim_tokens=[str(abandoned.claim_token)])
    started = RunLedger(worker_id).start([cancelled, abandoned, plain], _pipe())
    assert [started.stop_requested(i) for i in range(3)] == [True, True, False]


def test_a_batch_start_is_one_round_trip_with_the_claims_writes(tenant, worker_id):
    """What the claim and the doorbells queued (`writes`) goes out with the start: nothing is
    left for a second round trip."""
    claims = _claims(tenant, 4)
    writes = CoalescedWrites()
    queue = claims[0].execution.queue
    ids = [str(claim.execution.id) for claim in claims]
    get_redis().zadd(_inflight_key(str(tenant.id), queue), dict.fromkeys(ids, 1))
    RunLedger.doorbells_answered_into(writes, ids, tenant_id=str(tenant.id), queue=queue)
    pipe = _pipe()
    sent = []
    execute = pipe.execute

    def counted_execute(*args, **kwargs):
        sent.append(len(pipe))
        return execute(*args, **kwargs)

    pipe.execute = counted_execute
    RunLedger(worker_id).start(claims, pipe, writes=writes)

    assert len(sent) == 1
    assert get_redis().zcard(_inflight_key(str(tenant.id), queue)) == 0
    drained = get_redis().mget(_drained_keys(queue, timezone.now().timestamp()))
    assert sum(int(value or 0) for value in drained) == 4
    assert counters_read(worker_id).active_runs == 4


def test_redis_away_fails_no_start(tenant, worker_id):
    claims = _claims(tenant, 2)
    away = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    started = RunLedger(worker_id).start(claims, away.pipeline(transaction=False))
    assert started.replies is None
    assert started.quota(tenant.id) == (None, None)
    assert [started.stop_requested(i) for i in range(2)] == [False, False]


def test_an_end_counts_the_run_its_log_and_its_compute_time(tenant, worker_id):
    (claim,) = _claims(tenant, 1, claimed_at=timezone.now() - timedelta(seconds=30))
    ledger = RunLedger(worker_id)
    ledger.start([claim], _pipe())
    sink = LiveLogSink(execution_id=str(claim.execution.id), tenant_id=tenant.id, max_bytes=10_000)
    sink.write("stdout", "hello")
    log_before = log_bytes_used(tenant_id=tenant.id, fresh=True)

    pipe = _pipe()
    ledger.end_into(pipe, claim, errored=True, stored_log="hello\n")
    pipe.execute()
    live_tails_close([(sink, "failed")])

    counters = counters_read(worker_id)
    assert counters.active_runs == 0
    assert counters.completed_last_minute == 1
    assert counters.error_count == 1
    assert log_bytes_used(tenant_id=tenant.id, fresh=True) - log_before == len("hello\n")
    # 30 s since the claim (no handler start given): about half a compute minute.
    assert 0.49 <= tenant_usage(tenant=tenant).compute_minutes_this_month < 0.6
    entries = live_logs_redis().xrange(log_stream_key(str(claim.execution.id)))
    assert [fields for _id, fields in entries][1:] == [{"end": "failed"}]
    assert entries[0][1]["line"].endswith("hello")


def test_a_rejected_end_counts_no_log_and_no_error(tenant, worker_id):
    (claim,) = _claims(tenant, 1)
    ledger = RunLedger(worker_id)
    ledger.start([claim], _pipe())
    sink = LiveLogSink(execution_id=str(claim.execution.id), tenant_id=tenant.id, max_bytes=10_000)
    log_before = log_bytes_used(tenant_id=tenant.id, fresh=True)

    writes = CoalescedWrites()
    ledger.end_into(writes, claim, errored=False)
    pipe = _pipe()
    writes.send_into(pipe)
    pipe.execute()
    live_tails_close([(sink, "rejected")])

    counters = counters_read(worker_id)
    assert (counters.active_runs, counters.completed_last_minute, counters.error_count) == (0, 1, 0)
    assert log_bytes_used(tenant_id=tenant.id, fresh=True) == log_before
    assert not live_logs_redis().exists(log_stream_key(str(claim.execution.id)))  # it wrote nothing


def test_a_crashed_run_counts_as_ended_with_an_error(tenant, worker_id):
    claims = _claims(tenant, 1)
    ledger = RunLedger(worker_id)
    ledger.start(claims, _pipe())
    ledger.crashed()
    counters = counters_read(worker_id)
    assert (counters.active_runs, counters.error_count) == (0, 1)
