"""Hand-written SQL on the hot path (PostgreSQL): statements prepared once per connection,
the column list of a model under an alias, and an instance built from a row of it with the
ORM's own converters, so an UPDATE ... RETURNING gives the same objects a queryset would,
without a reload."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from functools import cache
from typing import Any

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Field, Model


@contextlib.contextmanager
def server_bound_cursor() -> Iterator[Any]:
    """A psycopg cursor with server-side binding on Django's connection (same transaction).
    Django's own cursor binds on the client: it quotes every value into the SQL text (what a
    batch of arrays would spend most of its time on) and cannot prepare statements.

    It keeps Django's connection handling true: the health check runs first (as Django's
    cursor does), and a failure flags the connection the way Django's error wrapper does,
    so that `close_old_connections` replaces a dropped connection before the next task or
    tick; a raw cursor that did not would fail every later task of this process on a
    connection PostgreSQL had already closed."""

    connection.close_if_health_check_failed()
    connection.ensure_connection()
    try:
        with psycopg.Cursor(connection.connection) as cursor:
            yield cursor
    except psycopg.Error:
        connection.errors_occurred = True
        raise


def prepare_statements() -> bool:
    """Whether the hot path's statements are prepared on the server. Not behind a
    transaction-pooling PgBouncer (DATABASE_TRANSACTION_POOLING): a prepared statement lives
    on one server connection, and the next transaction may run on another. Unprepared, they
    are planned on every execution instead (the price of pooling)."""
    return not settings.DATABASE_TRANSACTION_POOLING


def execute_prepared(sql: str, params: Sequence[object]) -> tuple | None:
    """Run `sql` on Django's connection (same transaction) as a server-side prepared statement
    and return its first row. Unprepared, PostgreSQL would plan every execution again; on the
    partitioned executions table that planning costs more than the statement itself. Cast
    parameters whose type PostgreSQL cannot infer."""
    with server_bound_cursor() as cursor:
        cursor.execute(sql, params, prepare=prepare_statements())
        return cursor.fetchone()


@cache
def _fields(model: type[Model]) -> tuple[Field, ...]:
    return tuple(model._meta.concrete_fields)


def columns(model: type[Model], alias: str) -> str:
    """`alias."col", ...` for every concrete field of `model`, in `_fields` order."""
    return ", ".join(f'{alias}."{field.column}"' for field in _fields(model))


def width(model: type[Model]) -> int:
    return len(_fields(model))


@cache
def _loader(
    model: type[Model], vendor: str
) -> tuple[list[str], tuple[tuple[int, Field, tuple], ...]]:
    """What building an instance of `model` needs, worked out once per process: the attribute
    names in `_fields` order, and the fields that have database converters (JSON, mostly)
    with them. The ORM asks each field for its converters on every row it loads; on the
    claim path that asking cost more than the conversions themselves."""
    db = connections[DEFAULT_DB_ALIAS]
    fields = _fields(model)
    converting = tuple(
        (index, field, tuple(converters))
        for index, field in enumerate(fields)
        if (converters := field.get_db_converters(db))
    )
    return [field.attname for field in fields], converting


def instance(model: type[Model], values: Sequence[object]) -> Model:
    """The instance for `values` (a row slice in `columns` order), as the ORM would load it."""
    db = connections[DEFAULT_DB_ALIAS]
    attnames, converting = _loader(model, db.vendor)
    if len(values) != len(attnames):
        raise ValueError(f"{model.__name__}: {len(values)} values for {len(attnames)} fields")
    values = list(values)
    for index, field, converters in converting:
        value = values[index]
        for converter in converters:
            value = converter(value, field, db)
        values[index] = value
    return model.from_db(DEFAULT_DB_ALIAS, attnames, values)
