"""Which node an execution belongs to, and the lock on its run, read in as few round trips as
the worker's hot path allows.

Every DAG node's execution passes here twice (context, then settle), so on PostgreSQL these are
prepared statements on the worker's connection: the ORM's query building costs more than the
statements themselves. A node's link is written once, in the transaction that dispatches it,
and never changes, so each process caches the links it has read or written.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db import connection

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
