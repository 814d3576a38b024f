"""Executions across tasks, manual retry, and the admin views of runs and schedulers."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.log_search_pages import log_search_page, other_filters
from api.pagination import ExecutionCursorPagination
from api.schema import page_of
from api.serializers import ExecutionOutput
from api.strict import query_int, refuse_body
from api.tenancy import is_platform_staff, request_tenant
from scheduler_app import selectors
from scheduler_app.errors import NotFound, ValidationFailed
from scheduler_app.models import Tenant
from scheduler_app.selectors.log_search_budget import log_search_budget
from scheduler_app.services import retries, scheduler_control

# The failover's shard parameter is read up to this (SCHEDULER_SHARDS is far below it).
MAX_SHARD_NUMBER = 9999

EXECUTION_FILTERS = [
    OpenApiParameter(
        "status", str, description="Comma list of statuses (`completed` means `success`)"
    ),
    OpenApiParameter("task", str, description="Task id"),
    OpenApiParameter("tag", str, description="Tasks carrying this tag"),
    OpenApiParameter("since", str, description="scheduled_at >= (ISO 8601 with offset)"),
    OpenApiParameter("until", str, description="scheduled_at < (ISO 8601 with offset)"),
    OpenApiParameter("ordering", str, enum=list(selectors.EXECUTION_ORDERINGS)),
    OpenApiParameter(
        "log_contains",
        str,
        description="Words in the stored log (full-text, web-search syntax). A search is cut"
        " after LOG_SEARCH_TIMEOUT_SECONDS (503 `log_search_timeout`: narrow it); a tenant"
        " runs at most LOG_SEARCH_MAX_CONCURRENT_PER_TENANT at once (429"
        " `too_many_log_searches`, Retry-After)",
    ),
]


class ExecutionCursor(ExecutionCursorPagination):
    def get_ordering(self, request, queryset, view):
        wanted = request.query_params.get("ordering", "-scheduled_at")
        if wanted not in selectors.EXECUTION_ORDERINGS:
            raise ValidationFailed(
                f"ordering must be one of {', '.join(selectors.EXECUTION_ORDERINGS)}",
                field="ordering",
            )
        # The id breaks ties so a cursor never skips or repeats rows with equal times.
        return (wanted, "-id" if wanted.startswith("-") else "id")


class ExecutionListView(APIView):
    @extend_schema(parameters=EXECUTION_FILTERS, responses=page_of(ExecutionOutput, cursor=True))
    def get(self, request: Request) -> Response:
        tenant, filters = request_tenant(request), request.query_params
        paginator = ExecutionCursor()
        if "log_contains" in filters:
            others = other_filters(filters)
            with log_search_budget(tenant_id=tenant.id):
                page = log_search_page(
                    paginator,
                    request,
                    view=self,
                    search=lambda window: selectors.execution_list(
                        tenant=tenant, filters=filters, log_window=window
                    ),
                    tenant=tenant,
                    words=filters["log_contains"],
                    runs=None
                    if others is None
                    else selectors.execution_list(tenant=tenant, filters=others),
                )
        else:
            # A list: the replica's when there is one (a little behind, never for a write).
            queryset = selectors.execution_list(tenant=tenant, filters=filters, for_listing=True)
            page = paginator.paginate_queryset(queryset, request, view=self)
        return paginator.get_paginated_response(ExecutionOutput(page, many=True).data)


class RetryOutput(serializers.Serializer):
    execution_id = serializers.UUIDField()
    retry_of = serializers.UUIDField()
    status = serializers.CharField()


class ExecutionRetryView(APIView):
    write_role = "operator"

    @extend_schema(
        request=None,
        responses={202: RetryOutput, 404: OpenApiResponse(), 409: OpenApiResponse()},
    )
    def post(self, request: Request, execution_id: str) -> Response:
        execution = selectors.execution_get(
            tenant=request_tenant(request), execution_id=execution_id
        )
        refuse_body(request)
        retry = retries.execution_retry(execution=execution)
        return Response(
            {"execution_id": str(retry.id), "retry_of": str(execution.id), "status": retry.status},
            status=status.HTTP_202_ACCEPTED,
        )


def admin_scope(request: Request) -> Tenant | None:
    """Platform staff see every tenant (or one, with ?tenant=slug); others their own."""
    if not is_platform_staff(request):
        return request_tenant(request)
    slug = request.query_params.get("tenant")
    if not slug:
        return None
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise NotFound("tenant not found")
    return tenant


class AdminMetricsView(APIView):
    staff_all_tenants = True

    @extend_schema(
        parameters=[
            OpenApiParameter("window_hours", int, description="Counts over the last N hours"),
            OpenApiParameter("tenant", str, description="Platform staff: one tenant's slug"),
        ],
        responses={200: OpenApiResponse(description="counts, success rate, queue depth")},
    )
    def get(self, request: Request) -> Response:
        window_hours = query_int(request, "window_hours", default=24, low=1, high=24 * 90)
        tenant = admin_scope(request)
        since = timezone.now() - timedelta(hours=window_hours)
        metrics = selectors.execution_metrics(tenant=tenant, since=since)
        metrics["tenant"] = tenant.slug if tenant else None
        return Response(metrics)


class SchedulerStatusView(APIView):
    staff_all_tenants = True

    @extend_schema(
        responses={
            200: OpenApiResponse(
                description="leader, epoch, standbys and lag of every shard (`shards`; the"
                " top-level `leader` and `standbys` are shard 0's), the live beats, the nodes"
            )
        }
    )
    def get(self, request: Request) -> Response:
        return Response(scheduler_control.scheduler_status())


class SchedulerFailoverView(APIView):
    platform_staff_only = True

    @extend_schema(
        request=None,
        parameters=[
            OpenApiParameter(
                "shard", int, description="The shard whose leader yields (SCHEDULER_SHARDS > 1)"
            )
        ],
        responses={202: OpenApiResponse(), 400: OpenApiResponse(), 409: OpenApiResponse()},
    )
    def post(self, request: Request) -> Response:
        refuse_body(request)
        # The service says which shards there are; this only reads a number.
        shard = query_int(request, "shard", default=0, low=0, high=MAX_SHARD_NUMBER)
        return Response(
            scheduler_control.scheduler_failover(shard=shard),
            status=status.HTTP_202_ACCEPTED,
        )
