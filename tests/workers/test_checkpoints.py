"""Checkpoints on the worker's path, against the real PostgreSQL and Redis: a state kept by
one attempt is the next attempt's `resumed_from`, masked, capped and budgeted per tenant;
a shell task's checkpoint file reaches its next attempt; another tenant never sees it."""

from __future__ import annotations

import os
import threading
import uuid

import pytest
from django.test import override_settings

from handler_contract.base import BufferedLogSink, CheckpointRefused, HandlerContext
from runs.finish import run_finish
from scheduler_app.models import RunCheckpoint, TaskExecution
from scheduler_app.services.checkpoints import checkpoint_save, checkpoints_expire
from scheduler_app.services.claims import execution_claim
from scheduler_app.services.secrets import secret_create
from scheduler_app.services.task_definitions import task_trigger
from tests import checkpoint_handlers  # noqa: F401  (registers the handlers)
from tests.factories import make_task
from workers.checkpoints import RunCheckpoints
from workers.execute import execute_claimed
from workers.handlers.shell import run_shell
from workers.shell_sandbox import shell_sandbox_for

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(60)]

RETRY_AT_ONCE = {"max_attempts": 3, "backoff": "fixed", "base_delay_seconds": 0}


def _claim_and_run(execution_id):
    claim = execution_claim(execution_id=execution_id, worker_id="w-test", lease_seconds=60)
    assert claim is not None
    executed = execute_claimed(claim, stop_requested=False)
    report = run_finish(claim=claim, outcome=executed.outcome, log_text=executed.sink.buffer.text())
    return executed, report


def test_a_timed_out_attempt_leaves_its_checkpoint_to_the_next_attempt_masked(tenant):
    secret_create(tenant=tenant, name="token", value="s3cr3t-value-42")
    task = make_task(
        tenant,
        name="resumable",
        schedule={"type": "manual"},
        handler={"type": "python", "callable": "test.checkpoint_then_hang"},
        parameters={"note": "token={{secret:token}}"},
        timeout_seconds=1,
        retry_policy=RETRY_AT_ONCE,
    )
    first = task_trigger(task=task)
    executed, report = _claim_and_run(first.id)
    assert executed.outcome.status == "timed_out"
    second = TaskExecution.platform.get(id=report.next_attempt_id)
    assert second.attempt == 2 and second.root_execution_id == first.id

    executed, _ = _claim_and_run(second.id)
    assert executed.outcome.status == "success"
    # The state rests masked: the secret the handler put in it is not in the database.
    assert executed.outcome.result == {"resumed_from": {"done": 3, "note": "token=****"}}
    stored = RunCheckpoint.platform.get(chain_id=first.id)
    assert stored.attempt == 1 and "s3cr3t" not in str(stored.state)


def test_a_first_start_resumes_from_nothing_and_the_cap_refuses_a_big_state(tenant):
    task = make_task(
        tenant,
        name="too-big",
        schedule={"type": "manual"},
        handler={"type": "python", "callable": "test.checkpoint_bytes"},
        parameters={"size": 2000},
        retry_policy={"max_attempts": 1},
    )
    run = task_trigger(task=task)
    with override_settings(CHECKPOINTS={**_checkpoints(), "MAX_BYTES": 1024}):
        executed, _ = _claim_and_run(run.id)
    assert executed.outcome.status == "failed"
    assert executed.outcome.error_class == "exception:CheckpointRefused"
    assert "over the cap of 1,024 (CHECKPOINT_MAX_BYTES)" in executed.outcome.error_message
    assert not RunCheckpoint.platform.filter(tenant=tenant).exists()


def _checkpoints():
    from django.conf import settings

    return dict(settings.CHECKPOINTS)


def _store(tenant, chain_id=None, attempt=1, secrets=()):
    chain_id = chain_id or uuid.uuid4()
    return RunCheckpoints(
        tenant_id=tenant.id,
        chain_id=chain_id,
        execution_id=uuid.uuid4() if attempt > 1 else chain_id,
        attempt=attempt,
        secrets=secrets,
    )


def test_a_refused_checkpoint_leaves_the_previous_one_standing(tenant):
    store = _store(tenant)
    store.save_state({"step": 1})
    with (
        override_settings(CHECKPOINTS={**_checkpoints(), "MAX_BYTES": 64}),
        pytest.raises(CheckpointRefused, match="over the cap"),
    ):
        store.save_state({"step": 2, "blob": "y" * 100})
    with pytest.raises(CheckpointRefused, match="must be JSON"):
        store.save_state({"step": 3, "bad": {1, 2}})
    assert store.resumed_state() == {"step": 1}


def test_a_tenant_past_its_checkpoint_budget_is_refused_and_another_tenant_is_not(
    tenant, tenant_factory
):
    other, _ = tenant_factory("bystander")
    spender = _store(tenant)
    bystander = _store(other)
    budget = {**_checkpoints(), "TENANT_BYTES_PER_WINDOW": 10_000}
    with override_settings(CHECKPOINTS=budget):
        for _ in range(4):
            spender.save_state({"blob": "z" * 2000})
        with pytest.raises(CheckpointRefused, match="CHECKPOINT_TENANT_BYTES_PER_WINDOW"):
            for _ in range(3):
                spender.save_state({"blob": "z" * 2000})
        bystander.save_state({"blob": "b" * 2000})  # its own budget, untouched
    assert bystander.resumed_state() == {"blob": "b" * 2000}


def test_a_zombie_attempt_cannot_overwrite_a_later_attempts_checkpoint(tenant):
    chain = uuid.uuid4()
    later = _store(tenant, chain_id=chain, attempt=2)
    later.save_state({"by": 2})
    zombie = _store(tenant, chain_id=chain, attempt=1)
    zombie.save_state({"by": 1})
    assert _store(tenant, chain_id=chain, attempt=3).resumed_state() == {"by": 2}


def test_another_tenants_chain_id_finds_no_checkpoint(tenant, tenant_factory):
    other, _ = tenant_factory("intruder")
    chain = uuid.uuid4()
    _store(tenant, chain_id=chain).save_state({"private": "data"})
    # The intruder's worker asking for the same chain (a forged or guessed id) sees nothing,
    nosy = RunCheckpoints(tenant_id=other.id, chain_id=chain, execution_id=chain, attempt=2)
    assert nosy.resumed_state() is None
    # and its save cannot take the row over.
    nosy.save_state({"stolen": True})
    assert RunCheckpoint.platform.get(chain_id=chain).state == {"private": "data"}


def test_old_checkpoints_expire(tenant):
    from datetime import timedelta

    from django.utils import timezone

    chain = uuid.uuid4()
    checkpoint_save(
        tenant_id=tenant.id,
        chain_id=chain,
        execution_id=chain,
        attempt=1,
        state={"old": True},
        now=timezone.now() - timedelta(days=8),
    )
    fresh = _store(tenant)
    fresh.save_state({"new": True})
    assert checkpoints_expire() == 1
    assert list(RunCheckpoint.platform.values_list("chain_id", flat=True)) == [fresh.chain_id]


def _shell_ctx(store, *, timeout=20.0):
    return HandlerContext(
        execution_id=str(store.execution_id),
        attempt=store.attempt,
        timeout_seconds=timeout,
        parameters={},
        log=BufferedLogSink(1 << 20),
        cancel_event=threading.Event(),
        checkpoints=store,
    )


def test_a_shell_tasks_checkpoint_file_reaches_its_next_attempt_even_after_a_timeout(tenant):
    sandbox = shell_sandbox_for(egress_allowed=False)
    file = '"$SCHEDULER_CHECKPOINT_FILE"'
    script = f'cat {file}; echo "step-$TASK_ATTEMPT" >> {file}'
    first = _store(tenant)
    # Attempt 1 writes its step, then outlives its timeout: the file is kept all the same.
    ctx = _shell_ctx(first, timeout=0.5)
    outcome = run_shell(
        {"command": ["sh", "-c", script + "; sleep 30"]},
        ctx,
        kill_grace_seconds=0.2,
        sandbox=sandbox,
    )
    assert outcome.status == "timed_out"
    assert bytes(RunCheckpoint.platform.get(chain_id=first.chain_id).file_data) == b"step-1\n"

    second = _store(tenant, chain_id=first.chain_id, attempt=2)
    ctx = _shell_ctx(second)
    outcome = run_shell({"command": ["sh", "-c", script]}, ctx, sandbox=sandbox)
    assert outcome.status == "success", ctx.log.text()
    assert ctx.log.stream_text("stdout") == "step-1\n"  # what attempt 1 left
    assert bytes(RunCheckpoint.platform.get(chain_id=first.chain_id).file_data) == (
        b"step-1\nstep-2\n"
    )


def test_a_shell_checkpoint_file_over_the_cap_is_not_kept(tenant):
    store = _store(tenant)
    ctx = _shell_ctx(store)
    script = 'head -c 5000 /dev/zero > "$SCHEDULER_CHECKPOINT_FILE"'
    with override_settings(CHECKPOINTS={**_checkpoints(), "MAX_BYTES": 1024}):
        store.file_cap_bytes = 1024
        outcome = run_shell(
            {"command": ["sh", "-c", script]}, ctx, sandbox=shell_sandbox_for(egress_allowed=False)
        )
    assert outcome.status == "success"
    assert "checkpoint file not kept: over 1,024 bytes" in ctx.log.text()
    assert not RunCheckpoint.platform.filter(chain_id=store.chain_id).exists()


def test_a_preempted_shell_task_that_checkpoints_gets_sigterm_and_is_handed_back(tenant):
    store = _store(tenant)
    ctx = _shell_ctx(store)
    # Writes step 1, then waits; on SIGTERM it saves where it was and exits.
    script = (
        'trap \'echo "stopped-at-1" > "$SCHEDULER_CHECKPOINT_FILE"; exit 0\' TERM; '
        'echo step-1 > "$SCHEDULER_CHECKPOINT_FILE"; '
        "while true; do sleep 0.05; done"
    )

    def preempt_once_written():
        # The worker's preemption, once the task has written its file (the run watcher does
        # this from its poll; no database here: this thread has a connection of its own).
        while not ctx.preempted.wait(0.05):
            path = store._watched
            if path and os.path.exists(path) and os.path.getsize(path):
                ctx.preempted.set()

    threads = [threading.Thread(target=preempt_once_written)]
    for thread in threads:
        thread.start()
    outcome = run_shell(
        {"command": ["sh", "-c", script]}, ctx, sandbox=shell_sandbox_for(egress_allowed=False)
    )
    ctx.preempted.set()
    for thread in threads:
        thread.join()
    assert outcome.error_class == "preempted", (outcome, ctx.log.text())
    assert "the worker is being preempted: sending SIGTERM" in ctx.log.text()
    assert bytes(RunCheckpoint.platform.get(chain_id=store.chain_id).file_data) == b"stopped-at-1\n"


def test_a_preempted_shell_task_that_does_not_checkpoint_runs_on(tenant):
    store = _store(tenant)
    ctx = _shell_ctx(store)
    ctx.preempted.set()  # told from the start: it takes no part in checkpointing
    outcome = run_shell(
        {"command": ["sh", "-c", "sleep 0.5; echo finished"]},
        ctx,
        sandbox=shell_sandbox_for(egress_allowed=False),
    )
    assert outcome.status == "success" and ctx.log.stream_text("stdout") == "finished\n"


def test_a_lease_renewal_saves_a_changed_checkpoint_file(tenant, tmp_path):
    """What a SIGKILLed worker leaves of a shell task: the file as of its last renewal."""
    store = _store(tenant)
    path = tmp_path / "checkpoint"
    path.write_bytes(b"")
    store.watch_file(str(path))
    store.renewal_save()  # unchanged: nothing written
    assert not RunCheckpoint.platform.filter(chain_id=store.chain_id).exists()
    path.write_bytes(b"rows=500\n")
    store.renewal_save()
    assert bytes(RunCheckpoint.platform.get(chain_id=store.chain_id).file_data) == b"rows=500\n"
    store.watch_file(None)
    path.write_bytes(b"rows=900\n")
    store.renewal_save()  # no longer watched (the attempt ended)
    assert bytes(RunCheckpoint.platform.get(chain_id=store.chain_id).file_data) == b"rows=500\n"


def test_preempted_raised_unasked_is_a_failed_attempt_not_a_hand_back(tenant):
    task = make_task(
        tenant,
        name="bouncer",
        schedule={"type": "manual"},
        handler={"type": "python", "callable": "test.preempted_unasked"},
        retry_policy=RETRY_AT_ONCE,
    )
    run = task_trigger(task=task)
    _, report = _claim_and_run(run.id)
    assert report.accepted and report.next_attempt_id is not None
    run.refresh_from_db()
    assert (run.status, run.error_class) == ("failed", "preempted")
