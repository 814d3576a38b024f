"""A node execution's link, its run's lock and its upstream results, as the worker reads them
(real PostgreSQL; the lock is checked from a second connection)."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection, transaction

from dags.engine import state as links
from dags.engine.settle import dag_execution_settled, dag_upstream_results
from dags.models import DagNodeExecution, DagNodeState
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from handler_contract.base import HandlerOutcome
from runs.finish import run_finish
from scheduler_app.services.claims import execution_claim

ECHO = {"type": "python", "callable": "echo"}
NOOP = {"type": "python", "callable": "noop"}
UPSTREAM_ECHO = {"type": "python", "callable": "upstream_echo"}


def _claim_node(run, node_id: str):
    execution_id = DagNodeState.objects.get(run=run, node_id=node_id).execution_id
    claim = execution_claim(execution_id=execution_id, worker_id="w@host", lease_seconds=60)
    assert claim is not None
    return claim


def _node_state_reads() -> int:
    """Scans of the node-state table by this transaction so far."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) "
            "FROM pg_stat_xact_user_tables WHERE relname = %s",
            [DagNodeState._meta.db_table],
        )
        row = cursor.fetchone()
    return row[0] if row else 0


@pytest.mark.django_db
def test_upstream_results_are_read_only_for_handlers_that_can_see_them(tenant):
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "reads",
            "tasks": [
                {"id": "a", "handler": ECHO, "parameters": {"x": 1}},
                {"id": "reader", "handler": UPSTREAM_ECHO, "depends_on": ["a"]},
                {"id": "ignorer", "handler": NOOP, "depends_on": ["a"]},
            ],
        },
    )
    run = dag_trigger(dag=dag)
    claim = _claim_node(run, "a")
    outcome = HandlerOutcome("success", result={"x": 1})
    assert run_finish(
        execution_id=claim.execution.id, claim_token=claim.claim_token, outcome=outcome
    ).accepted
    links._links.clear()

    reader = _claim_node(run, "reader")
    before = _node_state_reads()
    assert dag_upstream_results(execution=reader.execution) == {"a": {"x": 1}}
    assert _node_state_reads() > before  # (the probe sees a read)

    ignorer = _claim_node(run, "ignorer")
    before = _node_state_reads()
    assert dag_upstream_results(execution=ignorer.execution) == {}
    assert _node_state_reads() == before  # nothing was read for a function that ignores them


def _run_row_is_locked(run_id) -> bool:
    """Whether another session finds the run row locked right now."""
    with _other_session() as other:
        try:
            other.execute(
                "SELECT 1 FROM dags_dagrun WHERE id = %s FOR UPDATE NOWAIT", [run_id]
            ).fetchall()
        except psycopg.errors.LockNotAvailable:
            return True
    return False


@pytest.fixture
def mapped_run(transactional_db, tenant):
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "mapped",
            "tasks": [
                {"id": "plain", "handler": NOOP},
                {"id": "fan", "handler": ECHO, "map_over": [1, 2]},
            ],
        },
    )
    return dag_trigger(dag=dag)


def _claimed_as_ended(execution_id):
    """The node's execution, claimed and marked successful in memory: what the finishing
    transaction hands to the engine (its row stays running; nothing here reads it)."""
    claim = execution_claim(execution_id=execution_id, worker_id="w@host", lease_seconds=60)
    assert claim is not None
    execution = claim.execution
    execution.status, execution.result = "success", {}
    return execution


@pytest.mark.parametrize("cached", [False, True])
def test_a_nodes_completion_locks_its_run_until_the_commit(mapped_run, cached):
    execution = _claimed_as_ended(
        DagNodeState.objects.get(run=mapped_run, node_id="plain").execution_id
    )
    links._links.clear()
    if cached:
        links.link_load(execution.root_execution_id)
    with transaction.atomic():
        assert not _run_row_is_locked(mapped_run.id)
        dag_execution_settled(execution=execution)
        assert _run_row_is_locked(mapped_run.id)
    assert not _run_row_is_locked(mapped_run.id)
    mapped_run.refresh_from_db()
    assert mapped_run.remaining_nodes == 1  # the mapped node is still going
    state = DagNodeState.objects.get(run=mapped_run, node_id="plain")
    assert (state.status, state.result) == ("success", {})


def test_a_chord_members_first_attempt_settles_without_the_run_lock(mapped_run):
    shard = DagNodeExecution.objects.get(run=mapped_run, node_id="fan", shard_index=1)
    execution = _claimed_as_ended(shard.execution_root_id)
    links._links.clear()
    with transaction.atomic():
        dag_execution_settled(execution=execution)
        assert not _run_row_is_locked(mapped_run.id)
    fan = DagNodeState.objects.get(run=mapped_run, node_id="fan")
    assert fan.map_finished == 1


@pytest.mark.parametrize("cached", [False, True])
def test_the_link_comes_with_its_run_locked(mapped_run, cached):
    shard = DagNodeExecution.objects.get(run=mapped_run, node_id="fan", shard_index=1)
    links._links.clear()
    if cached:
        links.link_load(shard.execution_root_id)
    with transaction.atomic():
        link, run = links.link_load_and_run_lock(shard.execution_root_id)
        assert (link.run_id, link.node_id, link.shard_index) == (mapped_run.id, "fan", 1)
        assert link.version_id == mapped_run.version_id
        assert run.id == mapped_run.id and run.status == "running"
        assert _run_row_is_locked(mapped_run.id)


@pytest.mark.django_db
def test_an_unknown_execution_has_no_link():
    import uuid

    assert links.link_load_and_run_lock(uuid.uuid4()) is None
    assert links.link_load(uuid.uuid4()) is None


def _other_session() -> psycopg.Connection:
    settings = connection.settings_dict
    return psycopg.connect(
        host=settings["HOST"] or None,
        port=settings["PORT"] or None,
        user=settings["USER"] or None,
        password=settings["PASSWORD"] or None,
        dbname=settings["NAME"],
        autocommit=True,
    )


def test_the_count_takes_the_run_lock_before_any_node_row(mapped_run):
    """Everything that changes a run (a cancel, an abort) locks its row and then node rows; the
    statement that counts a finished node must take them in the same order, or the two could
    deadlock."""
    import threading
    import time

    from django.db import connections

    from dags.engine.completion import node_complete_locking

    holder, probe = _other_session(), _other_session()
    holder.autocommit = False
    holder.execute("SELECT 1 FROM dags_dagrun WHERE id = %s FOR UPDATE", [mapped_run.id])
    done = threading.Event()

    def complete() -> None:
        try:
            with transaction.atomic():
                node_complete_locking(
                    run_id=mapped_run.id,
                    version_id=mapped_run.version_id,
                    node_id="plain",
                    status="success",
                    result={},
                )
        finally:
            connections.close_all()
            done.set()

    thread = threading.Thread(target=complete)
    thread.start()
    try:
        for _ in range(600):  # until the count waits for the run's lock
            waiting = probe.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            ).fetchone()[0]
            if waiting:
                break
            time.sleep(0.05)
        assert waiting, "the count never waited for the run's lock"
        # ... and holds no node row meanwhile.
        probe.execute(
            "SELECT 1 FROM dags_dagnodestate WHERE run_id = %s FOR UPDATE NOWAIT",
            [mapped_run.id],
        ).fetchall()
    finally:
        holder.rollback()
        thread.join(timeout=60)
        holder.close()
        probe.close()
    assert done.is_set()
    assert DagNodeState.objects.get(run=mapped_run, node_id="plain").status == "success"
