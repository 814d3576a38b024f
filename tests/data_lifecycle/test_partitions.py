"""Monthly partitions of the executions table on PostgreSQL (ARCHITECTURE §8)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from django.db import connection, models

from scheduler_app import partitions
from scheduler_app.models import TaskExecution
from tests.data_lifecycle.helpers import make_runs
from tests.factories import make_task

pytestmark = pytest.mark.django_db


def _partition_of(execution_id) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tableoid::regclass::text FROM scheduler_app_taskexecution WHERE id = %s",
            [execution_id],
        )
        return cursor.fetchone()[0]


def test_table_is_partitioned_with_composite_sql_key_and_id_as_django_pk():
    assert partitions.is_partitioned()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid = 'scheduler_app_taskexecution'::regclass AND contype = 'p'"
        )
        assert cursor.fetchone()[0] == "PRIMARY KEY (id, scheduled_at)"
        # Nothing may point at a partitioned table's rows by id alone.
        cursor.execute(
            "SELECT count(*) FROM pg_constraint WHERE contype = 'f' "
            "AND confrelid = 'scheduler_app_taskexecution'::regclass"
        )
        assert cursor.fetchone()[0] == 0
    assert TaskExecution._meta.pk.name == "id"


def test_housekeeping_creates_this_month_and_two_ahead():
    created = partitions.partitions_ensure(now=datetime(2031, 11, 15, tzinfo=UTC))
    assert created == [
        "scheduler_app_taskexecution_p203111",
        "scheduler_app_taskexecution_p203112",
        "scheduler_app_taskexecution_p203201",
    ]
    assert partitions.partitions_ensure(now=datetime(2031, 11, 20, tzinfo=UTC)) == []


def test_rows_land_in_their_month_and_a_query_spans_partitions(tenant):
    for month in (date(2030, 1, 1), date(2030, 2, 1), date(2030, 3, 1)):
        partitions.partition_create(month=month)
    task = make_task(tenant)
    jan, feb, mar = make_runs(
        task,
        [
            datetime(2030, 1, 31, 23, 59, 59, tzinfo=UTC),
            datetime(2030, 2, 1, 0, 0, tzinfo=UTC),
            datetime(2030, 3, 15, tzinfo=UTC),
        ],
    )
    assert _partition_of(jan.id) == "scheduler_app_taskexecution_p203001"
    assert _partition_of(feb.id) == "scheduler_app_taskexecution_p203002"
    assert _partition_of(mar.id) == "scheduler_app_taskexecution_p203003"
    history = list(
        TaskExecution.platform.filter(task=task)
        .order_by("-scheduled_at")
        .values_list("id", flat=True)
    )
    assert history == [mar.id, feb.id, jan.id]
    # Lookups by id alone (what Django does for pk) still find the row in any partition.
    assert TaskExecution.platform.get(pk=feb.id).scheduled_at == feb.scheduled_at


def test_creating_a_month_moves_its_rows_out_of_the_default_partition(tenant):
    task = make_task(tenant)
    (stranded,) = make_runs(task, [datetime(2035, 6, 3, tzinfo=UTC)])
    assert _partition_of(stranded.id) == partitions.DEFAULT_PARTITION
    assert partitions.partition_create(month=date(2035, 6, 1))
    assert _partition_of(stranded.id) == "scheduler_app_taskexecution_p203506"
    assert TaskExecution.platform.filter(task=task).count() == 1


def test_migration_converts_a_table_that_already_holds_rows(tenant):
    """The migration's conversion, run on a plain table (in a scratch schema) holding rows."""
    task = make_task(tenant)
    with connection.cursor() as cursor:
        cursor.execute("CREATE SCHEMA conv_scratch")
        cursor.execute("SET LOCAL search_path TO conv_scratch, public")
    with connection.schema_editor() as editor:
        editor.create_model(TaskExecution)
    assert not partitions.is_partitioned()
    times = [datetime(2024, m, d, tzinfo=UTC) for m in (1, 2, 3) for d in (3, 9, 17, 28)]
    rows = make_runs(task, times)

    partitions.table_convert_to_partitioned(connection, now=datetime(2026, 1, 5, tzinfo=UTC))

    assert partitions.is_partitioned()
    names = [p.name for p in partitions.partitions_list()]
    assert names[:3] == [
        "scheduler_app_taskexecution_p202401",
        "scheduler_app_taskexecution_p202402",
        "scheduler_app_taskexecution_p202403",
    ]
    assert "scheduler_app_taskexecution_p202603" in names
    assert TaskExecution.platform.count() == len(rows)
    assert _partition_of(rows[5].id) == "scheduler_app_taskexecution_p202402"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = 'conv_scratch' "
            "AND tablename = 'scheduler_app_taskexecution' "
            "AND indexname = 'uniq_exec_task_fire_attempt'"
        )
        assert cursor.fetchone()[0] == 1
        cursor.execute("SET LOCAL search_path TO public")


def test_later_ordinary_migrations_still_apply_to_the_partitioned_parent(tenant):
    """Other branches add columns and indexes with plain AddField/AddIndex migrations."""
    field = models.CharField(max_length=32, default="", blank=True)
    field.set_attributes_from_name("integrator_probe")
    index = models.Index(fields=["task", "status"], name="idx_exec_probe")
    with connection.schema_editor() as editor:
        editor.add_field(TaskExecution, field)
        editor.add_index(TaskExecution, index)
    partitions.partition_create(month=date(2036, 1, 1))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM information_schema.columns "
            "WHERE table_name = 'scheduler_app_taskexecution_p203601' "
            "AND column_name = 'integrator_probe'"
        )
        assert cursor.fetchone()[0] == 1
