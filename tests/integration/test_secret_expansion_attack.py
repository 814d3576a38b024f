"""`{{secret:name}}` is a template too, under the expression budget's output limit: a tenant
admin's task whose parameters reference a 64 KiB secret 5,000 times (a 100 KB definition that
would be 320 MB once filled in, in the shared worker's memory) fails at once with a clear
error, on the real worker, while another tenant's no-ops are timed; a reference used as
intended still resolves."""

from __future__ import annotations

import pytest

from scheduler_app.models import TaskExecution
from scheduler_app.services.secrets import MAX_VALUE_BYTES, secret_create
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task
from tests.integration.bystander import Bystander
from tests.integration.conftest import dump_logs
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

FINISHED = ("success", "failed", "timed_out", "cancelled")


def _run(task, worker) -> TaskExecution:
    execution = task_trigger(task=task)
    try:
        wait_until(
            lambda: TaskExecution.platform.get(id=execution.id).status in FINISHED,
            timeout=60,
            message="the run to end",
        )
    except AssertionError:
        print(dump_logs(worker))
        raise
    return TaskExecution.platform.get(id=execution.id)


def test_secret_references_past_the_output_budget_fail_the_run(tenant_factory, live_worker):
    acme, _ = tenant_factory("acme")
    demo, _ = tenant_factory("demo")
    secret_create(tenant=acme, name="blob", value="s" * MAX_VALUE_BYTES)
    bomb = make_task(
        acme,
        name="expand-the-secret",
        schedule={"type": "manual"},
        handler={"type": "python", "callable": "noop"},
        parameters={f"k{i}": "{{secret:blob}}" for i in range(5_000)},
        retry_policy={"max_attempts": 1},
    )
    once = make_task(
        acme,
        name="use-the-secret",
        schedule={"type": "manual"},
        handler={"type": "python", "callable": "echo"},
        parameters={"length_of": "{{secret:blob}}"},
        retry_policy={"max_attempts": 1},
    )
    bystander = Bystander(demo)
    bystander.run_once()
    bystander.seconds.clear()

    attack = task_trigger(task=bomb)
    seconds = bystander.run_while(
        lambda: TaskExecution.platform.get(id=attack.id).status not in FINISHED
    )
    refused = TaskExecution.platform.get(id=attack.id)

    assert refused.status == "failed"
    assert refused.error_class == "secret"
    assert "secret references would add more than 1048576 characters" in refused.error_message
    used = _run(once, live_worker)
    assert used.status == "success", used.error_message
    assert max(seconds) < 5.0, seconds
