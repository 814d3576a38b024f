"""A DAG hop's PostgreSQL round trips, counted the way `python -m bench dag` counts them: a
chain of no-op nodes run back to back by one worker process (each finish hands it the next
node), with libpq's trace on its connection (one round trip = one ReadyForQuery). Real
PostgreSQL and Redis; no timing is asserted, only the count of round trips."""

from __future__ import annotations

import tempfile

import pytest
from django.db import connection
from psycopg.pq import Trace

from dags.engine.dispatch import HandOn
from dags.models import DagNodeState
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from workers.runner import executions_run

pytestmark = pytest.mark.django_db(transaction=True)

NOOP = {"type": "python", "callable": "noop"}
HOPS = 8
# claim, quota count, BEGIN, finish, count (the run's lock), wave insert, COMMIT: no read of
# the node's task (an inline node's is read once per process, `dispatch_tasks`).
MAX_ROUND_TRIPS_PER_HOP = 7


def _chain(tenant, length: int):
    tasks = [{"id": "s0", "handler": NOOP}] + [
        {"id": f"s{i}", "handler": NOOP, "depends_on": [f"s{i - 1}"]} for i in range(1, length)
    ]
    dag = dag_create(tenant=tenant, raw={"dag": f"hops-{length}", "tasks": tasks})
    return dag_trigger(dag=dag)


def _round_trips(run_chain) -> int:
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    with tempfile.TemporaryFile() as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS)
        try:
            run_chain()
        finally:
            pgconn.untrace()
        trace.seek(0)
        messages = [line.split(b"\t") for line in trace.read().splitlines()]
    return sum(1 for m in messages if m[:1] == [b"B"] and m[2:3] == [b"ReadyForQuery"])


def test_a_dag_hop_costs_few_round_trips(tenant):
    run = _chain(tenant, HOPS + 2)
    first = str(DagNodeState.objects.get(run=run, node_id="s0").execution_id)
    # The first node warms the process's caches (the version's graph, its tasks, prepared
    # statements), as a worker's earlier runs would have.
    hand_on = HandOn.for_worker(worker_id="hops@host", tier="normal")
    executions_run(execution_ids=[first], worker_id="hops@host", queue="normal", hand_on=hand_on)
    follow = hand_on.take()
    ran = 0

    def run_chain() -> None:
        nonlocal follow, ran
        for _ in range(HOPS):
            assert follow is not None, "the finish handed nothing on"
            executions_run(execution_ids=[follow], worker_id="hops@host", hand_on=hand_on)
            follow = hand_on.take()
            ran += 1

    round_trips = _round_trips(run_chain)
    assert ran == HOPS
    assert round_trips / HOPS <= MAX_ROUND_TRIPS_PER_HOP, round_trips / HOPS
