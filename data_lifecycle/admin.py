"""Admin views of the data lifecycle: restored archive rows, per-task and per-DAG statistics
(read-only).

Registered from `SchedulerAppConfig.ready` to keep `admin.py` to the live models.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from data_lifecycle.models import DagStats, RestoredExecution, TaskStats


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    # Read-only means no "Delete selected" either: statistics and restored rows are written
    # and dropped by the data lifecycle's own jobs (retention), never by hand.
    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(RestoredExecution)
class RestoredExecutionAdmin(ReadOnlyAdmin):
    list_display = ["execution_id", "task_id", "status", "scheduled_at", "attempt", "source"]
    list_filter = ["status", "source"]
    search_fields = ["execution_id", "task_id"]
    date_hierarchy = "scheduled_at"


@admin.register(TaskStats)
class TaskStatsAdmin(ReadOnlyAdmin):
    list_display = ["task_id", "bucket", "bucket_start", "total", "duration_p95", "lag_p95"]
    list_filter = ["bucket"]
    search_fields = ["task_id"]
    date_hierarchy = "bucket_start"


@admin.register(DagStats)
class DagStatsAdmin(ReadOnlyAdmin):
    list_display = ["dag_id", "bucket", "bucket_start", "total"]
    list_filter = ["bucket"]
    search_fields = ["dag_id"]
    date_hierarchy = "bucket_start"
