"""Latency and success of one task or DAG over a window (thin: the selectors do the work)."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.serializers_stats import StatsOutput, TaskStatsOutput
from api.tenancy import request_tenant
from dags import selectors as dag_selectors
from data_lifecycle.selectors.latency import (
    DEFAULT_WINDOW,
    dag_latency,
    stats_query,
    task_latency,
)
from scheduler_app import selectors
from scheduler_app.selectors.resource_usage import task_resource_usage

STATS_PARAMETERS = [
    OpenApiParameter(
        "window",
        str,
        description="Hours or days back from now: `24h`, `7d` (default 7d). At most 14d by"
        " the hour, 400d by the day",
        pattern=r"^[1-9][0-9]{0,4}[hd]$",
    ),
    OpenApiParameter(
        "bucket",
        str,
        enum=["hour", "day"],
        description="The series' step (default: hour up to 2d, day beyond)",
    ),
]
STATS_RESPONSES = {
    200: StatsOutput,
    400: OpenApiResponse(description="bad `window` or `bucket` (the error names it)"),
    404: OpenApiResponse(description="no such task (or DAG) in the tenant"),
}


def _window_of(request: Request):
    window = request.query_params.get("window") or DEFAULT_WINDOW
    span, bucket = stats_query(window=window, bucket=request.query_params.get("bucket"))
    return window, span, bucket


class TaskStatsView(APIView):
    @extend_schema(parameters=STATS_PARAMETERS, responses={**STATS_RESPONSES, 200: TaskStatsOutput})
    def get(self, request: Request, task_id: str) -> Response:
        tenant = request_tenant(request)
        task = selectors.task_get(tenant=tenant, task_id=task_id)
        window, span, bucket = _window_of(request)
        stats = task_latency(
            tenant=tenant, task_id=task.id, window=span, bucket=bucket, now=timezone.now()
        )
        resources = task_resource_usage(tenant=tenant, task=task)
        return Response(TaskStatsOutput({"window": window, **stats, "resources": resources}).data)


class DagStatsView(APIView):
    @extend_schema(parameters=STATS_PARAMETERS, responses=STATS_RESPONSES)
    def get(self, request: Request, dag_id: str) -> Response:
        tenant = request_tenant(request)
        dag = dag_selectors.dag_get(tenant=tenant, dag_id=dag_id)
        window, span, bucket = _window_of(request)
        stats = dag_latency(
            tenant=tenant, dag_id=dag.id, window=span, bucket=bucket, now=timezone.now()
        )
        return Response(StatsOutput({"window": window, **stats}).data)
