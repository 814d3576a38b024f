"""Archive -> drop -> restore round trips, and per-tenant retention."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from django.core.management import call_command

from data_lifecycle.models import RestoredExecution
from data_lifecycle.services.archive_store import ArchiveStore, read_rows
from data_lifecycle.services.restore import executions_restore
from data_lifecycle.services.retention import executions_archive, retention_apply
from scheduler_app import partitions
from scheduler_app.models import ExecutionLog, ExecutionLoss, TaskExecution
from tests.data_lifecycle.helpers import make_runs
from tests.factories import make_task

pytestmark = pytest.mark.django_db


def _month_of_runs(task, month: date, count: int) -> list[TaskExecution]:
    start = datetime(month.year, month.month, 1, tzinfo=UTC)
    return make_runs(task, [start + timedelta(hours=3 * i) for i in range(count)])


def test_archive_drops_whole_partitions_and_restore_reads_them_back(tenant, tmp_path):
    for month in (date(2021, 1, 1), date(2021, 2, 1), date(2021, 3, 1)):
        partitions.partition_create(month=month)
    task = make_task(tenant)
    _month_of_runs(task, date(2021, 1, 1), 40)
    _month_of_runs(task, date(2021, 2, 1), 25)
    kept = _month_of_runs(task, date(2021, 3, 1), 10)
    store = ArchiveStore(str(tmp_path))

    report = executions_archive(before=datetime(2021, 3, 1, tzinfo=UTC), store=store)

    assert report.rows == 65
    assert report.partitions_dropped == [
        "scheduler_app_taskexecution_p202101",
        "scheduler_app_taskexecution_p202102",
    ]
    assert {p.name for p in partitions.partitions_list()}.isdisjoint(report.partitions_dropped)
    assert set(TaskExecution.platform.filter(task=task).values_list("id", flat=True)) == {
        r.id for r in kept
    }
    january = next(f for f in report.files if f.manifest.get("partition", "").endswith("202101"))
    lines = list(read_rows(january.location))  # Parquet since archives changed format
    assert january.location.endswith(".parquet")
    assert len(lines) == january.rows == 40
    assert lines[0]["parameters"] == {"n": 0}

    assert executions_restore(location=january.location) == 40
    assert executions_restore(location=january.location) == 40  # idempotent per file
    restored = RestoredExecution.platform.filter(source=january.location)
    assert restored.count() == 40
    assert {r.task_id for r in restored} == {task.id}
    assert min(r.scheduled_at for r in restored) == datetime(2021, 1, 1, tzinfo=UTC)


def test_rows_outside_partitions_are_archived_in_batches(tenant, tmp_path, settings):
    settings.LIFECYCLE = {**settings.LIFECYCLE, "ARCHIVE_BATCH_ROWS": 7}
    task = make_task(tenant)
    old = make_runs(task, [datetime(2019, 5, 1, tzinfo=UTC) + timedelta(days=i) for i in range(20)])
    store = ArchiveStore(str(tmp_path))

    report = executions_archive(
        before=datetime(2019, 6, 1, tzinfo=UTC), tenant_ids=[tenant.id], store=store
    )

    assert report.rows == len(old) == 20
    assert [f.rows for f in report.files] == [7, 7, 6]
    assert not TaskExecution.platform.filter(task=task).exists()
    assert sum(m["rows"] for m in store.manifests()) == 20


def test_retention_honours_each_tenants_period(tenant_factory, tmp_path):
    short, _ = tenant_factory("short-lived")
    long, _ = tenant_factory("long-lived")
    short.retention_days, long.retention_days = 30, 90
    short.save(update_fields=["retention_days"])
    long.save(update_fields=["retention_days"])
    now = datetime(2029, 6, 15, 12, tzinfo=UTC)
    for month in range(1, 7):
        partitions.partition_create(month=date(2029, month, 1))
    short_task, long_task = make_task(short), make_task(long)
    # short: 30 days -> cutoff 2029-05-16; long: 90 days -> cutoff 2029-03-17
    short_old, short_new = make_runs(
        short_task, [datetime(2029, 4, 10, tzinfo=UTC), datetime(2029, 5, 20, tzinfo=UTC)]
    )
    long_feb, long_mar, long_apr = make_runs(
        long_task,
        [
            datetime(2029, 2, 10, tzinfo=UTC),
            datetime(2029, 3, 20, tzinfo=UTC),
            datetime(2029, 4, 10, tzinfo=UTC),
        ],
    )
    ExecutionLog.objects.create(execution_id=short_old.id, tenant=short, text="old output")
    ExecutionLog.platform.filter(execution_id=short_old.id).update(
        created_at=datetime(2029, 4, 10, tzinfo=UTC)
    )

    old_loss, new_loss = (
        ExecutionLoss.objects.create(
            tenant=short, execution_id=run.id, attempt=1, outcome="requeued", lost_at=at
        )
        for run, at in ((short_old, datetime(2029, 4, 10, tzinfo=UTC)), (short_new, now))
    )

    report = retention_apply(now=now, store=ArchiveStore(str(tmp_path)))

    losses = set(ExecutionLoss.platform.values_list("id", flat=True))
    assert old_loss.id not in losses and new_loss.id in losses  # a loss goes with its run
    remaining = set(TaskExecution.platform.values_list("id", flat=True))
    assert short_old.id not in remaining  # older than 30 days
    assert short_new.id in remaining
    assert long_feb.id not in remaining  # its whole month is past 90 days: partition dropped
    assert {long_mar.id, long_apr.id} <= remaining  # within 90 days: kept
    assert not ExecutionLog.platform.filter(execution_id=short_old.id).exists()
    assert "scheduler_app_taskexecution_p202902" in report.partitions_dropped
    assert report.rows == 3  # long_feb + short_old + the log line


def test_archive_command_and_restore_list(tenant, tmp_path):
    task = make_task(tenant)
    make_runs(task, [datetime(2018, 1, 1, tzinfo=UTC) + timedelta(hours=i) for i in range(5)])
    call_command(
        "archive_executions",
        "--before",
        "2018-02-01",
        "--tenant",
        tenant.slug,
        "--archive-url",
        str(tmp_path),
    )
    assert not TaskExecution.platform.filter(task=task).exists()
    (archived,) = ArchiveStore(str(tmp_path)).manifests()
    call_command("restore_executions", archived["location"])
    assert RestoredExecution.platform.count() == 5


def test_a_partition_left_detached_by_an_interrupted_run_is_finished(tenant, tmp_path):
    partitions.partition_create(month=date(2022, 4, 1))
    task = make_task(tenant)
    _month_of_runs(task, date(2022, 4, 1), 12)
    partitions.partition_detach(name="scheduler_app_taskexecution_p202204")  # then "crashed"
    assert [p.name for p in partitions.partitions_detached()] == [
        "scheduler_app_taskexecution_p202204"
    ]

    report = executions_archive(
        before=datetime(2000, 1, 1, tzinfo=UTC), store=ArchiveStore(str(tmp_path))
    )

    assert report.partitions_dropped == ["scheduler_app_taskexecution_p202204"]
    assert report.rows == 12
    assert partitions.partitions_detached() == []
