"""Traces exported over OTLP/HTTP by the real beat and worker processes: an OTLP receiver
started here (an http.server thread decoding ExportTraceServiceRequest) sees one trace per
task run (the beat's fire span, its ring an event of it; the worker's run span, its claim,
handler and finish events of it, each step with its time) and one per DAG run (the beat's
DAG run span, each node's run span under it); and the worker's and the beat's log lines, and
the run's stored log, name the trace and span ids."""

from __future__ import annotations

import gzip
import threading
import time
import uuid
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from dags.models import DagRun
from dags.services.definitions import dag_create
from scheduler_app.models import ExecutionLog, TaskExecution
from tests.factories import make_task
from tests.integration.conftest import FAST_BEAT, FAST_WORKER, dump_logs
from tests.processes import (
    broker_key_prefix,
    quiesce,
    start_beat,
    start_worker,
    stop_all,
    wait_until,
)
from tests.tracing import handlers as traced_handlers

pytestmark = pytest.mark.django_db(transaction=True)

NOOP = {"type": "python", "callable": "noop"}


class OtlpReceiver:
    """POST /v1/traces: every span, with its process's service.name."""

    def __init__(self) -> None:
        self.spans: list[dict] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest.FromString(body)
                receiver.add(self.path, request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def add(self, path: str, request: ExportTraceServiceRequest) -> None:
        assert path == "/v1/traces"
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        {
                            "service": resource.get("service.name"),
                            "name": span.name,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_id": span.parent_span_id.hex(),
                            "start": span.start_time_unix_nano,
                            "end": span.end_time_unix_nano,
                            "events": {e.name: e.time_unix_nano for e in span.events},
                            "attributes": {
                                a.key: a.value.string_value or a.value.bool_value
                                for a in span.attributes
                            },
                        }
                    )
        with self.lock:
            self.spans.extend(found)

    def traces(self) -> dict[str, list[dict]]:
        with self.lock:
            grouped = defaultdict(list)
            for span in self.spans:
                grouped[span["trace_id"]].append(span)
            return grouped


def _one(spans: list[dict], name: str, **attributes) -> dict | None:
    matching = [
        s
        for s in spans
        if s["name"] == name and all(s["attributes"].get(k) == v for k, v in attributes.items())
    ]
    return matching[0] if len(matching) == 1 else None


def _task_trace(traces, execution_id: str) -> dict | None:
    """The run's spans, when the whole tree has arrived and is parented as documented."""
    for spans in traces.values():
        fire = _one(spans, "scheduler.fire", **{"scheduler.execution.id": execution_id})
        if fire is None:
            continue
        run = _one(spans, "worker.run")
        if run is None:
            return None
        return {"fire": fire, "run": run}
    return None


def _dag_trace(traces, run_id: str) -> dict | None:
    for spans in traces.values():
        root = _one(spans, "dag.run", **{"scheduler.dag.run.id": run_id})
        if root is None:
            continue
        runs = [s for s in spans if s["name"] == "worker.run"]
        if len(runs) < 2:
            return None
        return {"root": root, "runs": runs, "spans": spans}
    return None


def test_the_beat_and_the_worker_export_one_trace_per_run_and_per_dag_run(tenant):
    receiver = OtlpReceiver()
    tracing_env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_TRACES_SAMPLER": "always_on",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_INSTRUMENTATIONS": "none",
        "PYTHON_HANDLER_MODULES": traced_handlers.MODULES,
    }
    task = make_task(
        tenant,
        name="traced-every-second",
        schedule={"type": "interval", "expression": "1s"},
        handler={"type": "python", "callable": "test.logs_a_line"},
    )
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "traced-dag-every-second",
            "schedule": {"type": "interval", "expression": "1s"},
            "tasks": [
                {"id": "a", "handler": NOOP},
                {"id": "b", "handler": NOOP, "depends_on": ["a"]},
            ],
        },
    )
    prefix = f"trace-{uuid.uuid4().hex[:10]}:"
    with broker_key_prefix(prefix):
        worker = start_worker(
            name="w-trace", concurrency=2, env_overrides={**FAST_WORKER, **tracing_env}
        )
        beat = start_beat(node_id="trace-beat", env_overrides={**FAST_BEAT, **tracing_env})
        started = time.monotonic()
        found: dict = {}

        def exported() -> bool:
            traces = receiver.traces()
            if "task" not in found:
                for row in TaskExecution.platform.filter(task=task, status="success"):
                    found["task"] = _task_trace(traces, str(row.id))
                    if found["task"] is None:
                        del found["task"]
                    else:
                        break
            if "dag" not in found:
                for run in DagRun.platform.filter(dag=dag, status="success"):
                    found["dag"] = _dag_trace(traces, str(run.id))
                    if found["dag"] is None:
                        del found["dag"]
                    else:
                        break
            if "task" in found and "row" not in found:
                found["row"] = TaskExecution.platform.get(
                    id=found["task"]["fire"]["attributes"]["scheduler.execution.id"]
                )
            return "task" in found and "dag" in found

        try:
            wait_until(exported, timeout=45, message="a task run's and a DAG run's traces")
            print(f"traces complete {time.monotonic() - started:.1f} s after the beat started")
        except AssertionError:
            print(dump_logs(beat, worker))
            print(f"spans received: {len(receiver.spans)}: {receiver.spans[:10]}")
            raise
        finally:
            stop_all([beat, worker], timeout=10)
            quiesce(prefix)
            receiver.server.shutdown()

    fire, run = found["task"]["fire"], found["task"]["run"]
    # Two spans, one a process: the beat's fire, the worker's run under it, and no other.
    assert fire["service"] == "scheduler-beat" and fire["parent_id"] == ""
    assert fire["attributes"]["scheduler.schedule.due_at"]
    assert run["service"] == "scheduler-worker" and run["parent_id"] == fire["span_id"]
    assert sorted(s["name"] for s in receiver.traces()[fire["trace_id"]]) == [
        "scheduler.fire",
        "worker.run",
    ]
    # Every step, with its time, in the order the run went through them: the beat recorded
    # the fire and rang it (its span's end), the worker claimed, ran and finished it.
    # (The worker may take the doorbell before the beat's publish has returned: the fire's
    # end is not before the claim's start, the publish's start is.)
    # A step between two that each took under 5 ms has no event of its own
    # (`tracing.steps`): each stands in for by the mark before it, the span's start at first.
    fired, ran = fire["events"], run["events"]
    recorded = fired.get("scheduler.recorded", fire["start"])
    ring_started = fired.get("scheduler.ring.started", recorded)
    assert fire["start"] <= recorded <= ring_started <= fire["end"]
    claimed = ran.get("scheduler.claimed", run["start"])
    started = ran.get("scheduler.handler.started", claimed)
    ended = ran.get("scheduler.handler.ended", started)
    finishing = ran.get("scheduler.finish.started", ended)
    assert ring_started <= run["start"] <= claimed <= started <= ended <= finishing <= run["end"]

    # Log lines name their trace and span: the worker's, written while the handler's span
    # was current (Celery's own handlers, given the filter), and the platform's lines of the
    # run's stored log; the beat's lines have the fields too ("-" outside a span).
    handler = run
    ids = f"[trace={handler['trace_id']} span={handler['span_id']}]"
    logged = [line for line in worker.log().splitlines() if traced_handlers.LINE in line]
    assert [line for line in logged if ids in line], logged[:3]  # one run's line, its ids
    assert "[trace=- span=-]" in beat.log()
    assert "Logging error" not in worker.log() + beat.log()
    stored = ExecutionLog.platform.get(execution_id=found["row"].id).text.splitlines()
    suffix = f"[trace_id={handler['trace_id']} span_id={handler['span_id']}]"
    platform = [line for line in stored if "[system]" in line]
    assert any("calling python handler" in line for line in platform), stored
    # From the first: the ids ride on the lines the run writes, not a line of their own.
    assert all(line.endswith(suffix) for line in platform), stored

    dag_run = found["dag"]
    root = dag_run["root"]
    assert root["service"] == "scheduler-beat" and root["parent_id"] == ""
    assert {r["parent_id"] for r in dag_run["runs"]} == {root["span_id"]}
    for node in dag_run["runs"]:
        assert node["service"] == "scheduler-worker"
        assert set(node["events"]) <= {
            "scheduler.claimed",
            "scheduler.handler.started",
            "scheduler.handler.ended",
            "scheduler.finish.started",
        }
        assert node["start"] <= node["end"]
