"""The execution page's live log tail: the page follows the worker's Redis stream (written by
workers.live_logs.LiveLogSink, read over Server-Sent Events) and, when the run ends, shows
the stored log. Real Redis and PostgreSQL; the writer is the worker's own sink."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scheduler_app.choices import ExecutionStatus
from scheduler_app.live_logs import live_logs_redis, log_stream_key
from scheduler_app.models import ExecutionLog, TaskExecution
from tests.dashboard.conftest import add_execution, live_log_end
from tests.factories import make_task
from tests.streams import sync_chunks
from workers.live_logs import LiveLogSink

pytestmark = pytest.mark.django_db(transaction=True)


def events(chunks: Iterator[bytes]) -> Iterator[dict[str, str]]:
    """Parse an SSE byte stream into events ({"id", "event", "data"}), lazily."""
    buffer = ""
    for chunk in chunks:
        buffer += chunk.decode()
        while "\n\n" in buffer:
            block, buffer = buffer.split("\n\n", 1)
            event: dict[str, str] = {}
            for line in block.split("\n"):
                if line.startswith(":"):
                    continue
                field, _, value = line.partition(": ")
                event[field] = f"{event[field]}\n{value}" if field in event else value
            if event:
                yield event


@pytest.fixture
def running(tenant):
    task = make_task(tenant, name="chatty", schedule={"type": "manual"})
    execution = add_execution(task, minutes_ago=0.1, status=ExecutionStatus.RUNNING)
    yield execution
    live_logs_redis().delete(log_stream_key(str(execution.id)))


def finish(execution: TaskExecution, sink: LiveLogSink) -> None:
    """What the worker does at the end: persist the log, commit the status, close the tail."""
    ExecutionLog.objects.create(
        execution_id=execution.id, tenant_id=execution.tenant_id, text=sink.buffer.text()
    )
    TaskExecution.platform.filter(id=execution.id).update(status=ExecutionStatus.SUCCESS)
    live_log_end(sink, status=ExecutionStatus.SUCCESS)


def test_running_page_follows_the_stream_then_shows_the_stored_log(signed_in, running):
    page = signed_in.get(f"/dashboard/executions/{running.id}").content.decode()
    events_url = f"/dashboard/executions/{running.id}/log-events"
    assert f'data-log-events="{events_url}"' in page
    # The log is not in the polled fragment (a swap every few seconds would wipe the tail).
    fragment = signed_in.get(f"/dashboard/executions/{running.id}?fragment=1").content.decode()
    assert 'id="log"' not in fragment

    response = signed_in.get(events_url)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    stream = events(sync_chunks(response))

    sink = LiveLogSink(
        execution_id=str(running.id),
        tenant_id=running.tenant_id,
        max_bytes=1 << 20,
        secrets=("hunter2",),
    )
    # The worker's run watcher flushes the sink while the run goes; here the test does.
    sink.write("stdout", "step 1 of 2")
    sink.flush()
    # Followed while the run is still going: the line arrives before any end.
    first = next(stream)
    assert first["data"].endswith("[stdout] step 1 of 2") and "event" not in first
    sink.write("stderr", "password hunter2 used")
    sink.flush()
    second = next(stream)
    assert "[stderr] password" in second["data"] and "hunter2" not in second["data"]
    finish(running, sink)
    end = next(stream)
    assert end == {"id": end["id"], "event": "end", "data": "success"}
    assert list(stream) == []

    # Reconnecting with Last-Event-ID resumes after the lines already shown.
    resumed = signed_in.get(events_url, HTTP_LAST_EVENT_ID=first["id"])
    replay = list(events(sync_chunks(resumed)))
    assert [e.get("event") for e in replay] == [None, "end"]
    assert replay[0]["data"] == second["data"]

    # What the page swaps in at the end: the stored log.
    stored = signed_in.get(f"/dashboard/executions/{running.id}/log")
    assert stored.status_code == 200
    assert stored.content.decode().splitlines() == sink.buffer.text().splitlines()
    # A finished run's page shows the stored log and opens no stream.
    page = signed_in.get(f"/dashboard/executions/{running.id}").content.decode()
    assert "data-log-events" not in page and "step 1 of 2" in page


def test_a_run_whose_stream_expired_is_served_from_the_stored_log(signed_in, running):
    ExecutionLog.objects.create(
        execution_id=running.id, tenant_id=running.tenant_id, text="old line 1\nold line 2\n"
    )
    TaskExecution.platform.filter(id=running.id).update(status=ExecutionStatus.FAILED)
    response = signed_in.get(f"/dashboard/executions/{running.id}/log-events")
    got = list(events(sync_chunks(response)))
    assert [e["data"] for e in got] == ["old line 1", "old line 2", "failed"]
    assert got[-1]["event"] == "end"


def test_log_endpoints_are_tenant_scoped_and_need_a_login(signed_in, running, tenant_factory):
    from django.test import Client

    for suffix in ("log-events", "log"):
        url = f"/dashboard/executions/{running.id}/{suffix}"
        assert Client().get(url).status_code == 302  # to the login page
    other, _ = tenant_factory("globex")
    foreign_task = make_task(other, name="theirs", schedule={"type": "manual"})
    foreign = add_execution(foreign_task, minutes_ago=0.1, status=ExecutionStatus.RUNNING)
    for suffix in ("log-events", "log"):
        url = f"/dashboard/executions/{foreign.id}/{suffix}"
        assert signed_in.get(url).status_code == 404


def test_a_cut_tail_says_so_and_the_finished_run_is_served_its_stored_log(
    signed_in, running, settings
):
    # Room for a stream's first node and a few 100-byte lines.
    settings.LIVE_LOGS = {**settings.LIVE_LOGS, "RUN_MAX_BYTES": 6500}
    sink = LiveLogSink(execution_id=str(running.id), tenant_id=running.tenant_id, max_bytes=1 << 20)
    for index in range(20):
        sink.write("stdout", f"line-{index:02d} " + "z" * 100)
    sink.flush()
    assert sink.cut
    events_url = f"/dashboard/executions/{running.id}/log-events"
    stream = events(sync_chunks(signed_in.get(events_url)))
    live = [next(stream)]
    while live[-1].get("event") != "cut":
        live.append(next(stream))
    assert 0 < len(live) - 1 < 20
    assert "live-log budget of 6500 bytes is spent" in live[-1]["data"]
    finish(running, sink)
    assert [e.get("event") for e in stream] == ["end"]

    # Once the run has ended, a new follower gets the stored log (every line), not the tail
    # (which lingers a few seconds for the followers that were connected).
    assert live_logs_redis().exists(log_stream_key(str(running.id)))
    replay = list(events(sync_chunks(signed_in.get(events_url))))
    assert [e["data"].split("] ", 1)[-1][:7] for e in replay[:-1]] == [
        f"line-{index:02d}" for index in range(20)
    ]
    assert replay[-1] == {"event": "end", "data": "success"}
