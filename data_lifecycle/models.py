"""Tables of the data lifecycle: per-task statistics buckets and restored archive rows.

Moved here from scheduler_app without touching the database: the tables keep their names
(`Meta.db_table`), see migrations/0001_data_lifecycle_tables.py.
"""

from __future__ import annotations

from django.db import models

from scheduler_app.tenant_scoping import PlatformManager, TenantScopedManager


class StatsBucket(models.TextChoices):
    HOUR = "hour"
    DAY = "day"


class TaskStats(models.Model):
    """Runs of one task in one hour or day, by `scheduled_at`: counts by status and the
    p50/p95/p99 of duration (completed - started) and lag (started - scheduled), in seconds,
    with the mergeable histograms they are read from (`data_lifecycle.latency_sketch`): a
    window's percentiles come from the sum of its buckets' histograms.

    Maintained incrementally by `data_lifecycle.services.stats_refresh.task_stats_refresh`
    (recomputes only the buckets that can still change), so dashboards never scan the
    executions table.
    """

    tenant_id = models.UUIDField()
    # None: the tenant's rollup over all its tasks (what the overview reads).
    task_id = models.UUIDField(null=True, blank=True)
    bucket = models.CharField(max_length=8, choices=StatsBucket.choices)
    bucket_start = models.DateTimeField()
    total = models.IntegerField(default=0)
    # {"success": 10, "failed": 2, ...}
    by_status = models.JSONField(default=dict)
    duration_p50 = models.FloatField(null=True)
    duration_p95 = models.FloatField(null=True)
    duration_p99 = models.FloatField(null=True)
    lag_p50 = models.FloatField(null=True)
    lag_p95 = models.FloatField(null=True)
    lag_p99 = models.FloatField(null=True)
    # {"<log bin>": count}: see data_lifecycle.latency_sketch.
    duration_sketch = models.JSONField(default=dict)
    lag_sketch = models.JSONField(default=dict)
    refreshed_at = models.DateTimeField()

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        db_table = "scheduler_app_taskstats"
        verbose_name = "task stats"
        verbose_name_plural = "task stats"
        indexes = [
            models.Index(fields=["bucket", "bucket_start"], name="idx_stats_bucket_start"),
            models.Index(
                fields=["tenant_id", "bucket", "task_id", "bucket_start"], name="idx_stats_tenant"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task_id} {self.bucket} {self.bucket_start:%Y-%m-%d %H:%M}"


class DagStats(models.Model):
    """Runs of one DAG in one hour or day, by `scheduled_at`: what `TaskStats` is for a task
    (counts by run status, histograms of run duration and of schedule-to-start lag)."""

    tenant_id = models.UUIDField()
    dag_id = models.UUIDField()
    bucket = models.CharField(max_length=8, choices=StatsBucket.choices)
    bucket_start = models.DateTimeField()
    total = models.IntegerField(default=0)
    by_status = models.JSONField(default=dict)
    duration_sketch = models.JSONField(default=dict)
    lag_sketch = models.JSONField(default=dict)
    refreshed_at = models.DateTimeField()

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        verbose_name = "DAG stats"
        verbose_name_plural = "DAG stats"
        indexes = [
            models.Index(fields=["bucket", "bucket_start"], name="idx_dagstats_bucket_start"),
            models.Index(
                fields=["tenant_id", "bucket", "dag_id", "bucket_start"], name="idx_dagstats_dag"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.dag_id} {self.bucket} {self.bucket_start:%Y-%m-%d %H:%M}"


class RestoredExecution(models.Model):
    """An archived execution read back for investigation (`manage.py restore_executions`).

    A side table on purpose: restored history never re-enters the live table, its
    partitions or the scheduler's queries.
    """

    execution_id = models.UUIDField(db_index=True)
    tenant_id = models.UUIDField(db_index=True)
    task_id = models.UUIDField(db_index=True)
    status = models.CharField(max_length=16)
    scheduled_at = models.DateTimeField()
    attempt = models.PositiveSmallIntegerField(default=1)
    # The whole archived row, as exported.
    row = models.JSONField()
    source = models.CharField(max_length=512, db_index=True)
    restored_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedManager()
    platform = PlatformManager()

    class Meta:
        db_table = "scheduler_app_restoredexecution"
        ordering = ["-scheduled_at"]

    def __str__(self) -> str:
        return f"restored {self.execution_id} from {self.source}"
