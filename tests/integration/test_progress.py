"""Progress seen while a run goes on a real worker: the API (detail and lists), the SSE log
stream and the dashboard; stored with the execution when it ends."""

from __future__ import annotations

import asyncio
import concurrent.futures

import pytest

from api.log_events import follow_log
from scheduler_app.models import ExecutionLog, TaskExecution
from scheduler_app.services.log_followers import log_follower_open
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = (
    "echo starting; echo '::progress 40 copying'; sleep 6;"
    " echo '::progress 90 almost there'; sleep 1; echo finished"
)


def _progress(api, execution_id):
    response = api.get(f"/api/v1/executions/{execution_id}")
    assert response.status_code == 200
    return response.json()


@pytest.mark.needs_os_tool("bubblewrap")
def test_shell_progress_is_seen_while_running_and_stored_at_the_end(tenant, api, live_worker):
    task = make_task(
        tenant,
        name="copier",
        schedule={"type": "manual"},
        handler={"type": "shell", "command": ["sh", "-c", SCRIPT]},
    )
    execution = task_trigger(task=task)
    seen: dict = {}

    def running_with_progress() -> bool:
        body = _progress(api, execution.id)
        if body["status"] == "running" and body["progress"]:
            seen.update(body)
            return True
        return False

    wait_until(running_with_progress, timeout=30, message="progress while running")
    assert seen["progress"]["percent"] == 40 and seen["progress"]["message"] == "copying"
    assert seen["progress"]["updated_at"].endswith("Z")
    # The lists carry it too (read in one round trip for the page).
    listed = api.get(f"/api/v1/tasks/{task.id}/executions").json()["results"]
    assert listed[0]["id"] == str(execution.id) and listed[0]["progress"]["percent"] == 40
    listed = api.get(f"/api/v1/executions?task={task.id}&status=running").json()["results"]
    assert [e["progress"]["message"] for e in listed] == ["copying"]

    events = _followed(execution.id, tenant_id=tenant.id)
    assert "event: progress" in events
    assert '"percent": 40.0' in events and '"percent": 90.0' in events
    # (the worker's `running sh -c ...` line quotes the command, progress lines included)
    assert "event: end" in events and "[stdout] ::progress" not in events

    stored = TaskExecution.platform.get(id=execution.id)
    assert stored.status == "success"
    assert stored.progress["percent"] == 90 and stored.progress["message"] == "almost there"
    assert _progress(api, execution.id)["progress"]["message"] == "almost there"
    log = ExecutionLog.platform.get(execution_id=execution.id).text
    assert "[stdout] starting" in log and "[stdout] finished" in log
    assert "[stdout] ::progress" not in log


def test_python_progress_shows_on_the_dashboard_while_running(tenant_and_user, client, live_worker):
    tenant, user = tenant_and_user
    task = make_task(
        tenant,
        name="stepper",
        schedule={"type": "manual"},
        handler={"type": "python", "callable": "steps"},
        parameters={"count": 4, "seconds_per_step": 1.5},
    )
    execution = task_trigger(task=task)
    client.force_login(user)

    def bar_shown() -> bool:
        html = client.get(f"/dashboard/executions/{execution.id}?fragment=1").content.decode()
        return "<progress" in html and ("step 1 of 4" in html or "step 2 of 4" in html)

    wait_until(bar_shown, timeout=30, message="the execution page's progress bar")
    task_page = client.get(f"/dashboard/tasks/{task.id}?fragment=1").content.decode()
    assert "<progress" in task_page
    wait_until(
        lambda: TaskExecution.platform.get(id=execution.id).status == "success",
        timeout=30,
        message="the run to end",
    )
    assert TaskExecution.platform.get(id=execution.id).progress["message"] == "step 4 of 4"


def _followed(execution_id, *, tenant_id) -> str:
    """Every event the live-log stream sends for a run that has ended (its stream in Redis),
    read on a thread and loop of its own, as the ASGI server's stream would send them."""

    async def read() -> str:
        follower = log_follower_open(tenant_id=tenant_id)
        return "".join(
            [event async for event in follow_log(execution_id=execution_id, follower=follower)]
        )

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, read()).result()
