"""One trace per run, on the real PostgreSQL and Redis, with this process playing the beat
(the fire's INSERT, the ring) and the worker (claim, handler, finish): the SDK's in-memory
exporter shows the span tree, each span parented where the docs say
(docs/operations/tracing.md), and a batch doorbell's runs each in a trace of its own."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from opentelemetry import trace

from api.serializers import ExecutionOutput
from dags.models import DagNodeState
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from scheduler_app.models import ExecutionLog, TaskExecution
from scheduler_app.ringing.ring import ring
from scheduler_app.ringing.traces import ring_held_back_record
from scheduler_app.services.firing import Fire, fires_record
from tests.api_clients import jwt_client
from tests.factories import make_task
from tests.tracing.conftest import by_name, events_of, parent_id, steps_of
from tracing.setup import TracingConfig, tracing_start, tracing_stop
from tracing.state import tracer
from workers.runner import execution_batch_run, execution_run

pytestmark = pytest.mark.django_db(transaction=True)

WORKER = "trace-test@host"
FIRE_STEPS = ["scheduler.recorded", "scheduler.ring.started"]
RUN_STEPS = [
    "scheduler.claimed",
    "scheduler.handler.started",
    "scheduler.handler.ended",
    "scheduler.finish.started",
]


def _fires(task, count: int) -> list[Fire]:
    # A queue of the test's own: the doorbell is published for real, no worker reads it.
    queue = f"trace-{uuid.uuid4().hex[:8]}"
    due = timezone.now() - timedelta(milliseconds=100)
    return [
        Fire(
            task_id=task.id,
            tenant_id=task.tenant_id,
            scheduled_at=due + timedelta(microseconds=index),
            priority=5,
            queue=queue,
            max_attempts=1,
        )
        for index in range(count)
    ]


def test_a_run_is_one_trace_from_the_fire_through_the_ring_claim_handler_and_finish(tenant, spans):
    task = make_task(tenant, name="traced", schedule={"type": "manual"})
    (fire,) = _fires(task, 1)
    bells = fires_record([fire], now=timezone.now())
    assert ring(bells) == 1
    assert execution_run(execution_id=bells[0].execution_id, worker_id=WORKER) == "success"

    # Two spans a run: the beat's fire (its recording and its ring), the worker's run (its
    # claim, handler and finish); no span of the ring's, the claim's or the finish's own.
    found = by_name(spans)
    assert sorted(found) == ["scheduler.fire", "worker.run"]
    (fired,) = found["scheduler.fire"]
    (handled,) = found["worker.run"]
    trace_id = fired.context.trace_id
    assert handled.context.trace_id == trace_id
    assert fired.parent is None  # the fire starts the trace
    assert parent_id(handled) == fired.context.span_id
    # The schedule's due time is on the fire; the run's id on both.
    assert fired.attributes["scheduler.schedule.due_at"] == fire.scheduled_at.isoformat()
    assert "scheduler.fire.recorded" not in fired.attributes  # marked only when it was not
    for span in (fired, handled):
        assert span.attributes["scheduler.execution.id"] == bells[0].execution_id
    assert handled.attributes["scheduler.status"] == "success"
    assert handled.attributes["scheduler.worker.id"] == WORKER
    assert handled.attributes["scheduler.handler.type"] == "python"
    # The steps with their times, in the order the run went through them: the fire's
    # INSERT, the publish (the fire span's end), the claim (the run span's start, the
    # statement's end), the handler, the finish (the run span's end); a step between two
    # that each took microseconds has no event of its own (`tracing.steps`).
    steps_of(fired, FIRE_STEPS)
    steps_of(handled, RUN_STEPS)
    assert fired.end_time <= handled.start_time

    row = TaskExecution.platform.get(id=bells[0].execution_id)
    flags = int(fired.context.trace_flags)
    assert flags & 1  # sampled
    assert row.traceparent == f"00-{trace_id:032x}-{fired.context.span_id:016x}-{flags:02x}"
    # What the API and the dashboard show, and what the run's log names.
    assert ExecutionOutput(row).data["trace_id"] == f"{trace_id:032x}"
    log = ExecutionLog.platform.get(execution_id=row.id).text
    ids = f"trace_id={trace_id:032x} span_id={handled.context.span_id:016x}"
    assert ids in log
    # And every line the platform writes about the run after it, the task's output as printed.
    (called,) = [line for line in log.splitlines() if "calling python handler" in line]
    assert called.endswith(f"[{ids}]")


def test_a_batch_doorbell_keeps_each_run_in_its_own_trace(tenant, spans):
    task = make_task(tenant, name="traced-batch", schedule={"type": "manual"})
    bells = fires_record(_fires(task, 3), now=timezone.now())
    assert ring(bells, batch=3) == 3  # one message for the three
    ids = [bell.execution_id for bell in bells]
    assert execution_batch_run(execution_ids=ids, worker_id=WORKER) == "batch of 3: 3 success"

    found = by_name(spans)
    fires = {s.attributes["scheduler.execution.id"]: s for s in found["scheduler.fire"]}
    runs = {s.attributes["scheduler.execution.id"]: s for s in found["worker.run"]}
    assert set(fires) == set(runs) == set(ids)
    assert len({s.context.trace_id for s in fires.values()}) == 3
    for execution_id in ids:
        assert runs[execution_id].context.trace_id == fires[execution_id].context.trace_id
        assert parent_id(runs[execution_id]) == fires[execution_id].context.span_id
    # One message rang the three: each fire span ends with that one publish.
    assert len({s.end_time for s in fires.values()}) == 1
    # One claim statement, and the batch's successes finish in one statement: the three run
    # spans start with the one and end with the other, each its own handler's times between
    # where they took 5 ms or more (a noop's do not: `tracing.steps`).
    assert len({s.start_time for s in runs.values()}) == 1
    assert len({s.end_time for s in runs.values()}) == 1
    for run in runs.values():
        steps_of(run, RUN_STEPS)
    for step in ("scheduler.claimed", "scheduler.finish.started"):
        assert len({events_of(s).get(step) for s in runs.values()} - {None}) <= 1


def test_a_dag_run_is_one_trace_with_its_nodes_as_children(tenant, spans):
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "traced-dag",
            "tasks": [
                {"id": "left", "handler": {"type": "python", "callable": "noop"}},
                {"id": "right", "handler": {"type": "python", "callable": "noop"}},
            ],
        },
    )
    run = dag_trigger(dag=dag)
    executions = list(DagNodeState.objects.filter(run=run).values_list("node_id", "execution_id"))
    assert len(executions) == 2
    for _, execution_id in executions:
        assert execution_run(execution_id=str(execution_id), worker_id=WORKER) == "success"

    found = by_name(spans)
    (dag_span,) = found["dag.run"]
    assert dag_span.parent is None
    assert dag_span.attributes["scheduler.dag.run.id"] == str(run.id)
    claims = found["worker.run"]
    assert {s.attributes["scheduler.execution.id"] for s in claims} == {
        str(execution_id) for _, execution_id in executions
    }
    for claim in claims:
        assert claim.context.trace_id == dag_span.context.trace_id
        assert parent_id(claim) == dag_span.context.span_id
    run.refresh_from_db()
    assert run.traceparent.split("-")[2] == f"{dag_span.context.span_id:016x}"


def test_a_fire_not_sampled_records_no_span_but_keeps_its_decision_for_the_worker(tenant):
    exporter_spans = []

    class Collect:
        def export(self, batch):
            exporter_spans.extend(batch)

        def shutdown(self):
            pass

        def force_flush(self, timeout_millis=0):
            return True

    provider = tracing_start(TracingConfig(sampler="always_off", libraries=()), exporter=Collect())
    try:
        task = make_task(tenant, name="unsampled", schedule={"type": "manual"})
        bells = fires_record(_fires(task, 1), now=timezone.now())
        ring(bells)
        assert execution_run(execution_id=bells[0].execution_id, worker_id=WORKER) == "success"
    finally:
        tracing_stop(provider)
    row = TaskExecution.platform.get(id=bells[0].execution_id)
    assert row.traceparent  # the decision travels with the run: not sampled
    assert not int(row.traceparent[-2:], 16) & 1
    assert exporter_spans == []
    assert ExecutionOutput(row).data["trace_id"] is None


def test_tracing_off_writes_no_context_and_makes_no_span(tenant, spans):
    # Tracing was on (the fixture) and is switched off: nothing may keep a tracer.
    tracing_stop(None)
    assert tracer() is None
    task = make_task(tenant, name="untraced", schedule={"type": "manual"})
    bells = fires_record(_fires(task, 1), now=timezone.now())
    ring(bells)
    assert execution_run(execution_id=bells[0].execution_id, worker_id=WORKER) == "success"
    assert spans.get_finished_spans() == ()
    row = TaskExecution.platform.get(id=bells[0].execution_id)
    assert row.traceparent == ""
    assert ExecutionOutput(row).data["trace_id"] is None
    assert "trace_id=" not in ExecutionLog.platform.get(execution_id=row.id).text
    # No SDK provider was installed as OpenTelemetry's global one by any of this.
    assert not type(trace.get_tracer_provider()).__module__.startswith("opentelemetry.sdk")


def test_the_runs_page_and_the_api_show_its_trace_id(tenant_and_user, api, client, spans, settings):
    tenant, user = tenant_and_user
    settings.TRACING = {**settings.TRACING, "UI_URL": "http://traces.example/trace/{trace_id}"}
    task = make_task(tenant, name="traced-page", schedule={"type": "manual"})
    bells = fires_record(_fires(task, 1), now=timezone.now())
    execution_run(execution_id=bells[0].execution_id, worker_id=WORKER)
    # Its fire span is left open (never rung here): the run's span is of the same trace.
    (ran,) = by_name(spans)["worker.run"]
    trace_id = f"{ran.context.trace_id:032x}"

    answer = api.get(f"/api/v1/executions/{bells[0].execution_id}")
    assert answer.status_code == 200
    assert answer.json()["trace_id"] == trace_id
    client.force_login(user)
    page = client.get(f"/dashboard/executions/{bells[0].execution_id}").content.decode()
    assert f"<code>{trace_id}</code>" in page
    assert f'href="http://traces.example/trace/{trace_id}"' in page


def test_another_tenant_gets_a_404_and_never_the_trace_id(tenant_factory, spans):
    victim, _ = tenant_factory("victim")
    _, attacker_admin = tenant_factory("attacker")
    task = make_task(victim, name="victim-traced", schedule={"type": "manual"})
    bells = fires_record(_fires(task, 1), now=timezone.now())
    execution_run(execution_id=bells[0].execution_id, worker_id=WORKER)
    # Its fire span is left open (never rung here): the run's span is of the same trace.
    (ran,) = by_name(spans)["worker.run"]
    trace_id = f"{ran.context.trace_id:032x}"

    attacker = jwt_client(attacker_admin)
    answer = attacker.get(f"/api/v1/executions/{bells[0].execution_id}")
    assert answer.status_code == 404
    assert trace_id not in answer.content.decode()
    listed = attacker.get("/api/v1/executions").content.decode()
    assert trace_id not in listed and bells[0].execution_id not in listed


def test_a_fire_never_rung_here_still_reaches_the_exporter_when_tracing_stops(tenant, spans):
    task = make_task(tenant, name="never-rung", schedule={"type": "manual"})
    bells = fires_record(_fires(task, 1), now=timezone.now())
    # Its span waits for the ring, which never comes (the process stops first).
    assert "scheduler.fire" not in by_name(spans)
    tracing_stop(provider=None)
    (fired,) = by_name(spans)["scheduler.fire"]
    assert fired.attributes["scheduler.execution.id"] == bells[0].execution_id
    # It ends at its INSERT, the last step it saw.
    assert list(events_of(fired)) == ["scheduler.recorded"]
    assert fired.end_time == events_of(fired)["scheduler.recorded"]


def test_a_fire_held_back_ends_saying_so_and_its_later_ring_is_a_span_of_its_own(tenant, spans):
    task = make_task(tenant, name="held-back", schedule={"type": "manual"})
    bells = fires_record(_fires(task, 1), now=timezone.now())
    ring_held_back_record(bells)  # what `ring` does with the doorbells fair dispatch held back
    (fired,) = by_name(spans)["scheduler.fire"]
    assert list(events_of(fired)) == ["scheduler.recorded", "scheduler.ring.held_back"]
    assert fired.end_time == events_of(fired)["scheduler.ring.held_back"]
    # The leader rings it later (here at once): the fire's span has ended, so a ring span.
    assert ring(bells) == 1
    (rung,) = by_name(spans)["scheduler.ring"]
    assert parent_id(rung) == fired.context.span_id
    assert rung.start_time >= fired.end_time
    assert "scheduler.ring.started" not in events_of(fired)
