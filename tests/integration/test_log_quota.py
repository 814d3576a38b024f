"""The per-tenant log storage quota on a real worker: logs are counted as they are stored,
shown in tenant/usage; over the quota new logs are cut with a marker, the admins are alerted,
and runs still run."""

from __future__ import annotations

import pytest

from alerting.rules import alerts_evaluate
from scheduler_app.models import ExecutionLog, TaskExecution, Tenant
from scheduler_app.services.log_quota import log_bytes_used
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task
from tests.processes import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_os_tool("bubblewrap")]

LINES = "for i in $(seq 1 20); do echo line-$i-of-a-chatty-task; done"


def _run(task) -> TaskExecution:
    """Run `task` on the shared worker; back once the run has ended and its log is counted
    (the worker counts it in Redis just after the run's commit): the next run sees it."""
    execution = task_trigger(task=task)
    wait_until(
        lambda: TaskExecution.platform.get(id=execution.id).status not in ("queued", "running"),
        timeout=30,
        message="the run to end",
    )
    stored = ExecutionLog.platform.filter(tenant_id=task.tenant_id)
    wait_until(
        lambda: (
            log_bytes_used(tenant_id=task.tenant_id, fresh=True)
            == sum(stored.values_list("size_bytes", flat=True))
        ),
        timeout=10,
        message="the stored logs to be counted",
    )
    return TaskExecution.platform.get(id=execution.id)


def test_logs_over_the_quota_are_cut_with_a_marker_and_the_admins_are_alerted(
    tenant, api, live_worker
):
    task = make_task(
        tenant,
        name="chatty",
        schedule={"type": "manual"},
        handler={"type": "shell", "command": ["sh", "-c", LINES]},
    )
    first = _run(task)
    assert first.status == "success"
    first_log = ExecutionLog.platform.get(execution_id=first.id)
    assert "line-20-of-a-chatty-task" in first_log.text and not first_log.truncated
    usage = api.get("/api/v1/tenant/usage").json()
    assert usage["usage"]["log_bytes"] == first_log.size_bytes
    assert usage["quota"]["max_log_bytes"] == 100 * 1024**3

    # Room for about one more log and a half: the next one fits, the one after is cut.
    Tenant.objects.filter(id=tenant.id).update(
        max_log_bytes=first_log.size_bytes * 2 + first_log.size_bytes // 2
    )
    # The shared worker reads the counter afresh for each log (LOG_QUOTA_CACHE_SECONDS=0).
    assert not ExecutionLog.platform.get(execution_id=_run(task).id).truncated
    cut = _run(task)
    assert cut.status == "success"  # the run itself ran
    cut_log = ExecutionLog.platform.get(execution_id=cut.id)
    assert cut_log.truncated
    assert "[log cut: tenant acme has used" in cut_log.text
    assert "line-20-of-a-chatty-task" not in cut_log.text
    over = _run(task)
    assert over.status == "success"
    over_log = ExecutionLog.platform.get(execution_id=over.id).text
    assert over_log.startswith("[log cut:") and over_log.count("\n") == 1

    used = api.get("/api/v1/tenant/usage").json()["usage"]["log_bytes"]
    assert used >= Tenant.objects.get(id=tenant.id).max_log_bytes
    breached = [
        i.key for i, resolved in alerts_evaluate() if i.rule == "quota_breached" and not resolved
    ]
    assert breached == [f"{tenant.id}:max_log_bytes"]
