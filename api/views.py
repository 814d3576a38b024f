"""Thin DRF views: validate the shape, call a selector or a service, serialize."""

from __future__ import annotations

import json
import time as _time
from dataclasses import asdict

from django.http import HttpResponse, StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import renderers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.idempotency import idempotent
from api.log_events import log_event_stream_response
from api.pagination import ExecutionCursorPagination, PagePagination
from api.schema import (
    LogsOutput,
    PreviewOutput,
    RetriedAllOutput,
    RetriedOutput,
    TriggeredOutput,
    page_of,
)
from api.serializers import (
    ExecutionOutput,
    PauseInput,
    TaskInput,
    TaskOutput,
    TaskSavedOutput,
    TriggerInput,
)
from api.serializers_usage import ExecutionDetailOutput
from api.strict import NoteInput, body_note, query_int, refuse_body
from api.tenancy import request_actor, request_tenant
from api.views_operations import admin_scope
from runs import dead_letters
from scheduler_app import selectors
from scheduler_app.fleet.capabilities import task_warnings
from scheduler_app.fleet.records import worker_records
from scheduler_app.ringing.sticky import sticky_stats
from scheduler_app.selectors.checkpoints import checkpoint_summaries
from scheduler_app.selectors.losses import execution_losses
from scheduler_app.services import task_definitions
from scheduler_app.services.fleet import execution_cancel
from scheduler_app.services.retry_budget import retry_budget_usage
from scheduler_app.task_schedule import fires_left, schedule_of_task
from schedules.preview import timeline
from workers.queue_stats import tier_queue_stats

MAX_PREVIEW = 1000


def _user_or_none(request: Request):
    """The Django user behind the request (None for an API key)."""
    return request.user if getattr(request.user, "pk", None) else None


def _with_warnings(task) -> dict:
    """The saved task, with `warnings`: why it may not run yet (no live worker offers its
    handler type)."""
    return TaskSavedOutput(task, context={"warnings": task_warnings(task.handler_config)}).data


class TaskListView(APIView):
    write_role = "admin"

    @extend_schema(
        parameters=[
            OpenApiParameter("tag", str),
            OpenApiParameter("schedule_type", str),
            OpenApiParameter("paused", str, enum=["true", "false"]),
            OpenApiParameter("search", str),
            OpenApiParameter("ordering", str),
        ],
        responses=page_of(TaskOutput),
    )
    def get(self, request: Request) -> Response:
        # A list: the replica's when there is one (a little behind, never for a write).
        queryset = selectors.task_list(
            tenant=request_tenant(request), filters=request.query_params, for_listing=True
        )
        paginator = PagePagination()
        page = paginator.paginate_queryset(queryset, request, view=self)
        return paginator.get_paginated_response(TaskOutput(page, many=True).data)

    @extend_schema(
        request=TaskInput,
        responses={201: TaskSavedOutput},
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="Repeat-safe create/trigger",
            )
        ],
    )
    def post(self, request: Request) -> Response:
        tenant = request_tenant(request)

        def create() -> Response:
            spec = TaskInput(data=request.data)
            spec.is_valid(raise_exception=True)
            task = task_definitions.task_create(
                tenant=tenant, spec=spec.validated_data, created_by=_user_or_none(request)
            )
            return Response(_with_warnings(task), status=status.HTTP_201_CREATED)

        return idempotent(request, tenant=tenant, produce=create)


class TaskDetailView(APIView):
    write_role = "admin"

    @extend_schema(responses=TaskOutput)
    def get(self, request: Request, task_id: str) -> Response:
        task = selectors.task_get(tenant=request_tenant(request), task_id=task_id)
        return Response(TaskOutput(task).data)

    @extend_schema(request=TaskInput, responses=TaskSavedOutput)
    def put(self, request: Request, task_id: str) -> Response:
        task = selectors.task_get(tenant=request_tenant(request), task_id=task_id)
        spec = TaskInput(data=request.data)
        spec.is_valid(raise_exception=True)
        task = task_definitions.task_update(task=task, spec=spec.validated_data)
        return Response(_with_warnings(task))

    @extend_schema(request=TaskInput, responses=TaskSavedOutput)
    def patch(self, request: Request, task_id: str) -> Response:
        task = selectors.task_get(tenant=request_tenant(request), task_id=task_id)
        spec = TaskInput(data=request.data, partial=True)
        spec.is_valid(raise_exception=True)
        task = task_definitions.task_update(task=task, spec=spec.validated_data, partial=True)
        return Response(_with_warnings(task))

    @extend_schema(request=NoteInput, responses={204: None})
    def delete(self, request: Request, task_id: str) -> Response:
        task = selectors.task_get(tenant=request_tenant(request), task_id=task_id)
        task_definitions.task_delete(task=task, note=body_note(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class TaskTriggerView(APIView):
    write_role = "operator"

    @extend_schema(
        request=TriggerInput,
        responses={200: TriggeredOutput, 202: TriggeredOutput},
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="Repeat-safe create/trigger",
            )
        ],
    )
    def post(self, request: Request, task_id: str) -> Response:
        tenant = request_tenant(request)
        task = selectors.task_get(tenant=tenant, task_id=task_id)
        body = TriggerInput(data=request.data or {})
        body.is_valid(raise_exception=True)

        def trigger() -> Response:
            outcome = task_definitions.task_trigger_outcome(
                task=task, parameters=body.validated_data.get("parameters")
            )
            execution = outcome.execution
            return Response(
                {
                    "execution_id": str(execution.id),
                    "status": execution.status,
                    "joined": outcome.joined,
                    "existing": bool(outcome.joined),
                    "trigger_count": execution.trigger_count,
                    "scheduled_at": execution.scheduled_at.isoformat().replace("+00:00", "Z"),
                },
                # A singleton's existing run is not a new run accepted: 200, not 202.
                status=status.HTTP_200_OK
                if outcome.joined == "singleton"
                else status.HTTP_202_ACCEPTED,
            )

        return idempotent(request, tenant=tenant, produce=trigger)


class TaskPauseView(APIView):
    write_role = "operator"

    @extend_schema(request=PauseInput, responses=TaskOutput)
    def post(self, request: Request, task_id: str) -> Response:
        task = selectors.task_get(tenant=request_tenant(request), task_id=task_id)
        body = PauseInput(data=request.data)
        body.is_valid(raise_exception=True)
        paused = task_definitions.task_pause(
            task=task,
            note=body.validated_data.get("note", ""),
            paused_by=request_actor(request),
        )
        return Response(TaskOutput(paused).data)


class TaskResumeView(APIView):
    write_role = "operator"

    @extend_schema(request=None, responses=TaskOutput)
    def post(self, request: Request, task_id: str) -> Response:
        task = selectors.task_get(tenant=request_tenant(request), task_id=task_id)
        refuse_body(request)
        return Response(TaskOutput(task_definitions.task_resume(task=task)).data)


class TaskExecutionsView(APIView):
    @extend_schema(responses=page_of(ExecutionOutput, cursor=True))
    def get(self, request: Request, task_id: str) -> Response:
        tenant = request_tenant(request)
        task = selectors.task_get(tenant=tenant, task_id=task_id)
        queryset = selectors.execution_list_for_task(tenant=tenant, task=task).select_related(
            "task"
        )
        paginator = ExecutionCursorPagination()
        page = paginator.paginate_queryset(queryset, request, view=self)
        return paginator.get_paginated_response(ExecutionOutput(page, many=True).data)


class TaskSchedulePreviewView(APIView):
    @extend_schema(parameters=[OpenApiParameter("count", int)], responses=PreviewOutput)
    def get(self, request: Request, task_id: str) -> Response:
        task = selectors.task_get(tenant=request_tenant(request), task_id=task_id)
        count = query_int(request, "count", default=10, low=1, high=MAX_PREVIEW)
        entries = timeline(
            schedule_of_task(task), count=fires_left(task, count), now=timezone.now()
        )
        return Response(
            {
                "timezone": task.timezone,
                "fire_times": [_fire_time(e.fire) for e in entries if not e.skipped],
                "timeline": [
                    {**_fire_time(e.fire), "skipped": e.skipped, "reason": e.reason}
                    for e in entries
                ],
            }
        )


def _fire_time(fire) -> dict[str, str]:
    return {"utc": fire.utc.isoformat().replace("+00:00", "Z"), "local": fire.local.isoformat()}


class ExecutionDetailView(APIView):
    @extend_schema(responses=ExecutionDetailOutput)
    def get(self, request: Request, execution_id: str) -> Response:
        tenant = request_tenant(request)
        execution = selectors.execution_get(tenant=tenant, execution_id=execution_id)
        # Whether its run has a checkpoint and its size; the content is at .../checkpoint.
        summary = checkpoint_summaries(tenant=tenant, executions=[execution]).get(execution.id)
        losses = execution_losses(tenant=tenant, execution=execution)
        context = {"checkpoint": summary, "losses": losses}
        return Response(ExecutionDetailOutput(execution, context=context).data)


class EventStreamRenderer(renderers.BaseRenderer):
    """Lets `Accept: text/event-stream` through content negotiation; the view streams."""

    media_type = "text/event-stream"
    format = "sse"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if isinstance(data, dict | list):  # an error (401, 404, 429) before any stream: JSON
            return json.dumps(data).encode()
        return data if isinstance(data, bytes) else str(data).encode()


def _wants_event_stream(request: Request) -> bool:
    return "text/event-stream" in request.headers.get("Accept", "")


class ExecutionLogsView(APIView):
    renderer_classes = [renderers.JSONRenderer, EventStreamRenderer]

    @extend_schema(
        parameters=[OpenApiParameter("format", str, enum=["text"])],
        responses={200: LogsOutput},
    )
    def get(
        self, request: Request, execution_id: str
    ) -> Response | HttpResponse | StreamingHttpResponse:
        tenant = request_tenant(request)
        execution = selectors.execution_get(tenant=tenant, execution_id=execution_id)
        if _wants_event_stream(request) and request.query_params.get("format") != "text":
            return log_event_stream_response(
                execution=execution, last_event_id=request.headers.get("Last-Event-ID")
            )
        log = selectors.execution_log_get(tenant=tenant, execution=execution)
        text = log.text if log else ""
        if request.query_params.get("format") == "text":
            return HttpResponse(text, content_type="text/plain; charset=utf-8")
        return Response(
            {
                "execution_id": str(execution.id),
                "status": execution.status,
                "truncated": bool(log and log.truncated),
                "lines": text.splitlines(),
            }
        )


class ExecutionCancelView(APIView):
    write_role = "operator"

    @extend_schema(request=NoteInput, responses={202: OpenApiTypes.OBJECT, 409: OpenApiResponse()})
    def post(self, request: Request, execution_id: str) -> Response:
        execution = selectors.execution_get(
            tenant=request_tenant(request), execution_id=execution_id
        )
        outcome = execution_cancel(execution=execution, note=body_note(request))
        return Response(
            {"execution_id": str(execution.id), "status": outcome},
            status=status.HTTP_202_ACCEPTED,
        )


class AdminWorkersView(APIView):
    """The fleet: every registered worker with its last heartbeat, and the tier queues.

    Platform staff only: the fleet is shared, and its counts span every tenant."""

    platform_staff_only = True

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        now = _time.time()
        return Response(
            {
                "workers": [record.as_api(now) for record in worker_records()],
                "queues": tier_queue_stats(),
                "sticky_routing": sticky_stats(),
            }
        )


class AdminQueuesView(APIView):
    """Per-tier backlog, oldest wait and scaling signal; platform staff only (fleet-wide)."""

    platform_staff_only = True

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        return Response(
            {"tiers": tier_queue_stats(), "retry_budget": retry_budget_usage(now=timezone.now())}
        )


DEAD_LETTER_FILTERS = [
    OpenApiParameter("task", str, description="Task id, or words of its name"),
    OpenApiParameter("error", str, description="Words of the error class or message"),
    OpenApiParameter("since", str, description="Dead-lettered at or after (ISO 8601, offset)"),
]


class DeadLetterListView(APIView):
    staff_all_tenants = True

    @extend_schema(
        parameters=[
            OpenApiParameter("tenant", str, description="Platform staff: one tenant"),
            *DEAD_LETTER_FILTERS,
        ],
        responses=page_of(ExecutionOutput),
    )
    def get(self, request: Request) -> Response:
        queryset = selectors.dead_letter_list(
            tenant=admin_scope(request), filters=request.query_params
        )
        paginator = PagePagination()
        page = paginator.paginate_queryset(queryset, request, view=self)
        return paginator.get_paginated_response(ExecutionOutput(page, many=True).data)


class DeadLetterRetryAllView(APIView):
    write_role = "operator"

    @extend_schema(request=None, parameters=DEAD_LETTER_FILTERS, responses={202: RetriedAllOutput})
    def post(self, request: Request) -> Response:
        """Retry every dead letter of the tenant, or those the filters match; `results` says
        for each what happened (retried, already handled, refused and why)."""
        refuse_body(request)
        outcomes = dead_letters.dead_letters_retry_matching(
            tenant=request_tenant(request),
            filters=request.query_params,
            triggered_by=request_actor(request),
        )
        return Response(
            {
                "retried": sum(o.outcome == dead_letters.RETRIED for o in outcomes),
                "results": [asdict(o) for o in outcomes],
            },
            status=status.HTTP_202_ACCEPTED,
        )


class DeadLetterDetailView(APIView):
    write_role = "admin"

    @extend_schema(request=NoteInput, responses={204: None})
    def delete(self, request: Request, execution_id: str) -> Response:
        execution = selectors.dead_letter_get(
            tenant=request_tenant(request), execution_id=execution_id
        )
        dead_letters.dead_letter_delete(execution=execution, note=body_note(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class DeadLetterRetryView(APIView):
    write_role = "operator"

    @extend_schema(request=None, responses={202: RetriedOutput, 409: OpenApiResponse()})
    def post(self, request: Request, execution_id: str) -> Response:
        execution = selectors.dead_letter_get(
            tenant=request_tenant(request), execution_id=execution_id
        )
        refuse_body(request)
        retry = dead_letters.dead_letter_retry(
            execution=execution, triggered_by=request_actor(request)
        )
        if retry is None:
            return Response({"code": "conflict", "message": "already retried"}, status=409)
        return Response({"execution_id": str(retry.id)}, status=status.HTTP_202_ACCEPTED)
