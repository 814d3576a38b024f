"""The engine's rows: which execution runs which node (links), and the counters that make a node
ready, taken in one statement with the run's lock.

Which node an execution belongs to, and the lock on its run, read in as few round trips as
the worker's hot path allows.

Every DAG node's execution passes here twice (context, then settle), so on PostgreSQL these are
prepared statements on the worker's connection: the ORM's query building costs more than the
statements themselves. A node's link is written once, in the transaction that dispatches it,
and never changes, so each process caches the links it has read or written.

A node's end, counted: its final status, its children's counters, the run's count.

`node_end_and_count` does it all in one round trip (PostgreSQL): lock the run, mark the node
final, count it into its children and into the run. `node_set_final` and `children_count` are
the steps one by one, for a caller that holds the run's lock already (a skipped node, a node
that failed a `fail_all` run, a mapped node's join).

Every finish of a run's nodes serializes on the run row's lock, so how long the finishing
transaction holds it bounds a wide fan-in's throughput: 500 siblings finishing at once take
it one after the other, each until its commit. This statement takes it itself, first, so the
lock is held only from here to the commit: one round trip, not one for the lock, one for the
counts and one for the commit. (The order is the engine's usual one, run row then node rows,
so it cannot deadlock with a cancel or an abort; a caller that holds the lock already just
takes it again.) Rows that a transaction which held the lock before us changed are updated in
their newest version (READ COMMITTED re-checks an updated row), so the counts are exact.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any

from django.db import connection
from django.utils import timezone

from dags.choices import ACTIVE_NODE_STATUSES, NodeStatus, RunStatus
from dags.models import DagNodeExecution, DagNodeState, DagRun
from scheduler_app import db_rows


@dataclass(frozen=True)
class NodeLink:
    run_id: uuid.UUID
    version_id: uuid.UUID
    node_id: str
    shard_index: int | None
    execution_root_id: uuid.UUID


_links: dict[uuid.UUID, NodeLink] = {}
_MAX_CACHED_LINKS = 4096


def link_remember(link: NodeLink) -> None:
    if len(_links) >= _MAX_CACHED_LINKS:
        _links.clear()
    _links[link.execution_root_id] = link


def link_cached(root: uuid.UUID) -> NodeLink | None:
    return _links.get(root)


def link_load(root: uuid.UUID) -> NodeLink | None:
    """The link of the execution chain `root` (cached, or one read)."""
    cached = _links.get(root)
    if cached is not None:
        return cached
    row = db_rows.execute_prepared(_link_sql(), [root])
    if row is None:
        return None
    link = NodeLink(*row, execution_root_id=root)
    link_remember(link)
    return link


def run_lock(run_id: uuid.UUID) -> DagRun:
    """The run row, locked until the transaction ends (DagRun.DoesNotExist if it is gone)."""
    row = db_rows.execute_prepared(_run_lock_sql(), [run_id])
    if row is None:
        raise DagRun.DoesNotExist(f"DAG run {run_id} does not exist")
    return db_rows.instance(DagRun, row)


def link_load_and_run_lock(root: uuid.UUID) -> tuple[NodeLink, DagRun] | None:
    """The link of `root` and its run, locked until the transaction ends: one round trip
    when the link is not cached."""
    cached = _links.get(root)
    if cached is not None:
        return cached, run_lock(cached.run_id)
    row = db_rows.execute_prepared(_link_and_lock_sql(), [root])
    if row is None:
        return None
    run = db_rows.instance(DagRun, row[3:])
    link = NodeLink(row[0], run.version_id, row[1], row[2], execution_root_id=root)
    link_remember(link)
    return link, run


def upstream_results_load(*, run_id: uuid.UUID, node_ids: list[str]) -> dict[str, Any]:
    """{node id: result} of the given nodes of a run."""
    field = DagNodeState._meta.get_field("result")
    with db_rows.server_bound_cursor() as cursor:
        cursor.execute(_upstream_results_sql(), [run_id, node_ids], prepare=True)
        rows = cursor.fetchall()
    return {node_id: field.from_db_value(result, None, connection) for node_id, result in rows}


# Identifiers come from the models' metadata; every value is a bound parameter.
@cache
def _link_sql() -> str:
    links, runs = DagNodeExecution._meta.db_table, DagRun._meta.db_table
    return (
        f"SELECT l.run_id, r.version_id, l.node_id, l.shard_index FROM {links} l "  # noqa: S608
        f"JOIN {runs} r ON r.id = l.run_id WHERE l.execution_root_id = %s"
    )


@cache
def _run_lock_sql() -> str:
    runs = DagRun._meta.db_table
    return (
        f"SELECT {db_rows.columns(DagRun, 'r')} FROM {runs} r "  # noqa: S608
        "WHERE r.id = %s FOR UPDATE"
    )


@cache
def _link_and_lock_sql() -> str:
    links, runs = DagNodeExecution._meta.db_table, DagRun._meta.db_table
    return (
        f"SELECT l.run_id, l.node_id, l.shard_index, {db_rows.columns(DagRun, 'r')} "  # noqa: S608
        f"FROM {links} l JOIN {runs} r ON r.id = l.run_id WHERE l.execution_root_id = %s "
        "FOR UPDATE OF r"
    )


@cache
def _upstream_results_sql() -> str:
    states = DagNodeState._meta.db_table
    return (
        f"SELECT node_id, result FROM {states} "  # noqa: S608
        "WHERE run_id = %s AND node_id = ANY(%s)"
    )


@cache
def _sql(*, same_execution: bool) -> str:
    states = DagNodeState._meta.db_table
    runs = DagRun._meta.db_table
    execution = " AND execution_id = %s" if same_execution else ""
    ready = "FROM children WHERE remaining_upstream = 0 ORDER BY node_id"
    # Identifiers come from the models' metadata; every value is a bound parameter. Each
    # UPDATE is gated on the CTE before it (an uncorrelated EXISTS is evaluated before the
    # UPDATE scans anything), so the run row is locked before any node row.
    return (
        f"WITH run AS (SELECT {db_rows.columns(DagRun, 'r')} FROM {runs} r "  # noqa: S608
        "WHERE r.id = %s FOR UPDATE), "
        f"node AS (UPDATE {states} SET status = %s, result = %s::jsonb, "
        "error_message = %s, completed_at = %s, updated_at = %s "
        f"WHERE run_id = %s AND node_id = %s AND status = ANY(%s::text[]){execution} "
        "AND EXISTS (SELECT 1 FROM run WHERE status = %s) RETURNING id), "
        f"children AS (UPDATE {states} SET remaining_upstream = remaining_upstream - 1, "
        "upstream_succeeded = upstream_succeeded + %s, upstream_failed = upstream_failed + %s, "
        "upstream_skipped = upstream_skipped + %s "
        "WHERE run_id = %s AND status = %s AND node_id = ANY(%s::text[]) "
        "AND EXISTS (SELECT 1 FROM node) RETURNING id, node_id, remaining_upstream, "
        "upstream_succeeded, upstream_failed, upstream_skipped), "
        f"counted AS (UPDATE {runs} SET remaining_nodes = remaining_nodes - 1 "
        "WHERE id = %s AND EXISTS (SELECT 1 FROM node) RETURNING remaining_nodes) "
        "SELECT run.*, (SELECT remaining_nodes FROM counted), "
        f"ARRAY(SELECT id {ready}), ARRAY(SELECT node_id {ready}), "
        f"ARRAY(SELECT upstream_succeeded {ready}), ARRAY(SELECT upstream_failed {ready}), "
        f"ARRAY(SELECT upstream_skipped {ready}) FROM run"
    )


@dataclass
class Counted:
    remaining_nodes: int  # in the run, after this node
    ready: dict[str, DagNodeState]  # children whose upstream have all ended
    run_row: tuple  # the run as locked (built into a DagRun only if it is needed)

    @cached_property
    def run(self) -> DagRun:
        run = db_rows.instance(DagRun, self.run_row)
        run.remaining_nodes = self.remaining_nodes
        return run


def node_end_and_count(
    *,
    run_id: uuid.UUID,
    node_id: str,
    status: str,
    result: Any,
    error: str,
    execution_id: uuid.UUID | None,
    children: tuple[str, ...],
    succeeded: int,
    failed: int,
    skipped: int,
    now,
) -> Counted | None:
    """None when nothing was counted: the run is gone or not running, or the node was not
    active (already ended, or a stale execution of it)."""
    params: list[object] = [
        run_id,
        str(status),
        None if result is None else json.dumps(result),
        error[:4000],
        now,
        now,
        run_id,
        node_id,
        [str(active) for active in ACTIVE_NODE_STATUSES],
    ]
    if execution_id is not None:
        params.append(execution_id)
    params += [RunStatus.RUNNING.value, succeeded, failed, skipped, run_id]
    params += [NodeStatus.WAITING.value, list(children), run_id]
    # Prepared once per connection (the children travel as one array): planning this
    # statement every time cost about as much as running it.
    row = db_rows.execute_prepared(_sql(same_execution=execution_id is not None), params)
    if row is None:
        return None
    width = db_rows.width(DagRun)
    remaining, ids, nodes, succeeded_counts, failed_counts, skipped_counts = row[width:]
    if remaining is None:
        return None
    ready = {
        node: DagNodeState(
            id=state_id,
            run_id=run_id,
            node_id=node,
            status=NodeStatus.WAITING,
            remaining_upstream=0,
            upstream_succeeded=ok,
            upstream_failed=bad,
            upstream_skipped=skipped_count,
        )
        for state_id, node, ok, bad, skipped_count in zip(
            ids, nodes, succeeded_counts, failed_counts, skipped_counts, strict=True
        )
    }
    return Counted(remaining_nodes=remaining, ready=ready, run_row=row[:width])


def node_set_final(
    *,
    run: DagRun,
    node_id: str,
    status: str,
    result: Any,
    error: str = "",
    execution_id: uuid.UUID | None = None,
) -> bool:
    """End an active node (the run's lock held); False when it was not active."""
    now = timezone.now()
    states = DagNodeState.objects.filter(run=run, node_id=node_id, status__in=ACTIVE_NODE_STATUSES)
    if execution_id is not None:
        # Only the node's current execution may end it (not one from before a re-run).
        states = states.filter(execution_id=execution_id)
    return (
        states.update(
            status=status,
            result=result,
            error_message=error[:4000],
            completed_at=now,
            updated_at=now,
        )
        == 1
    )


def children_count(
    *, run: DagRun, children: tuple[str, ...], succeeded: int, failed: int, skipped: int
) -> dict[str, DagNodeState]:
    """Decrement the children's remaining_upstream in one statement; returns those at 0
    (their counters come back with the UPDATE, so readiness needs no second read)."""
    table = DagNodeState._meta.db_table
    placeholders = ", ".join(["%s"] * len(children))
    # Identifiers come from the model's metadata; every value is a bound parameter.
    sql = (
        f"UPDATE {table} SET remaining_upstream = remaining_upstream - 1, "  # noqa: S608
        "upstream_succeeded = upstream_succeeded + %s, "
        "upstream_failed = upstream_failed + %s, "
        "upstream_skipped = upstream_skipped + %s "
        f"WHERE run_id = %s AND status = %s AND node_id IN ({placeholders}) "
        "RETURNING id, node_id, remaining_upstream, upstream_succeeded, upstream_failed, "
        "upstream_skipped"
    )
    run_id = DagNodeState._meta.get_field("run").target_field.get_db_prep_value(
        run.id, connection, prepared=False
    )
    params = [succeeded, failed, skipped, run_id, NodeStatus.WAITING.value, *children]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return {
        node_id: DagNodeState(
            id=state_id,
            run_id=run.id,
            node_id=node_id,
            status=NodeStatus.WAITING,
            remaining_upstream=0,
            upstream_succeeded=ok,
            upstream_failed=bad,
            upstream_skipped=skipped_count,
        )
        for state_id, node_id, remaining, ok, bad, skipped_count in sorted(rows, key=lambda r: r[1])
        if remaining == 0
    }
