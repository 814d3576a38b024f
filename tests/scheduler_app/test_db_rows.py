"""Instances built from hand-written SQL rows (`scheduler_app.db_rows`) are the ones the ORM
would load: every field, JSON decoded, foreign keys as ids (real PostgreSQL)."""

from __future__ import annotations

import pytest
from django.db.models import Model
from django.utils import timezone

from scheduler_app import db_rows
from scheduler_app.models import TaskDefinition, TaskExecution, Tenant
from tests.factories import make_task

pytestmark = pytest.mark.django_db


def _row(model: type[Model], pk) -> tuple:
    with db_rows.server_bound_cursor() as cursor:
        cursor.execute(
            f"SELECT {db_rows.columns(model, 'x')} FROM {model._meta.db_table} x WHERE x.id = %s",
            [pk],
        )
        return cursor.fetchone()


def _field_values(instance: Model) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in instance._meta.concrete_fields}


@pytest.mark.parametrize("model", [TaskExecution, TaskDefinition, Tenant])
def test_an_instance_from_a_row_equals_the_orms(tenant, model):
    task = make_task(tenant, name="rows", parameters={"region": "eu", "sizes": [1, 2]})
    execution = TaskExecution.objects.create(
        tenant=tenant,
        task=task,
        status="success",
        scheduled_at=timezone.now(),
        parameters={"a": {"b": [1, None]}},
        result={"rows": 3, "ok": True},
    )
    pk = {TaskExecution: execution.id, TaskDefinition: task.id, Tenant: tenant.id}[model]
    built = db_rows.instance(model, _row(model, pk))
    loaded = model._base_manager.get(id=pk)
    assert _field_values(built) == _field_values(loaded)
    assert built._state.adding is False and built._state.db == "default"
    if model is TaskExecution:
        assert built.result == {"rows": 3, "ok": True}  # decoded, not the JSON text
        assert built.task_id == task.id


def test_a_row_of_the_wrong_width_is_refused(tenant):
    row = _row(Tenant, tenant.id)
    with pytest.raises(ValueError, match="Tenant"):
        db_rows.instance(Tenant, row[:-1])


@pytest.mark.django_db(transaction=True)
def test_a_connection_dropped_under_a_raw_cursor_is_replaced_before_the_next_task():
    """Regression: a worker pool process whose connection PostgreSQL terminated failed every
    later batch ("the connection is lost"): the raw cursor's error never flagged Django's
    connection, so `close_old_connections` (run before each task) kept the dead one."""
    import psycopg
    from django.db import close_old_connections, connection

    from tests.processes import database_url

    connection.ensure_connection()
    connection.close_at = None  # a persistent connection, as CONN_MAX_AGE gives the workers
    backend = connection.connection.info.backend_pid
    with psycopg.connect(database_url(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [backend])
    with pytest.raises(psycopg.OperationalError), db_rows.server_bound_cursor() as cursor:
        cursor.execute("SELECT 1")
    close_old_connections()  # what task_prerun does before the next task
    with db_rows.server_bound_cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != backend
