"""Backfill API: create one for a task or a DAG, follow its progress, cancel it.

Request: `{"start": "2026-11-01T00:00:00Z", "end": "2026-11-08T00:00:00Z", "max_parallel": 4}`
(start inclusive, end exclusive, offsets required; max_parallel 1..100, default 1).
`"reprocess"`: what it does with a fire that already has a run: `"none"` (default: leave it),
`"failed"` (run again the fires whose run failed, timed out or was cancelled), `"all"` (run
again every ended one); a fire whose run is still going is left to it.
`"dry_run": true` creates nothing and answers 200 with the fire times it would run (the first
50, each with its `outcome`: new, rerun, skipped_succeeded, skipped_running or
skipped_recorded, and the status its recorded run `was`), their count, and how many fires of
the whole range have each outcome (`counts`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.idempotency import idempotent
from api.pagination import PagePagination
from api.strict import NoteInput, StrictSerializer, body_note
from api.tenancy import request_tenant
from dags import backfill_selectors, selectors
from dags.models import Backfill
from dags.services import backfills
from scheduler_app import selectors as task_selectors
from scheduler_app.errors import ValidationFailed


class BackfillInput(StrictSerializer):
    start = serializers.CharField(help_text="ISO 8601 with offset; the first fire time counted")
    end = serializers.CharField(help_text="ISO 8601 with offset; fire times before it")
    max_parallel = serializers.IntegerField(required=False, default=1)
    reprocess = serializers.JSONField(
        required=False,
        default="none",
        help_text="none (default) | failed | all: what to do with fires that already have a run",
    )
    dry_run = serializers.BooleanField(
        required=False,
        default=False,
        help_text="true: nothing is created; the answer (200) lists the fire times it would run",
    )


def _when(raw: Any, *, field: str) -> datetime:
    try:
        moment = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError as error:
        raise ValidationFailed(f"{field} is not an ISO 8601 date-time", field=field) from error
    if moment.tzinfo is None:
        raise ValidationFailed(f"{field} needs a UTC offset (or Z)", field=field)
    return moment


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def backfill_output(backfill: Backfill) -> dict[str, Any]:
    target = backfill.task if backfill.task_id else backfill.dag
    return {
        "id": str(backfill.id),
        "target": {
            "type": "task" if backfill.task_id else "dag",
            "id": str(target.id),
            "name": target.name,
        },
        "start": _iso(backfill.start_at),
        "end": _iso(backfill.end_at),
        "max_parallel": backfill.max_parallel,
        "reprocess": backfill.reprocess,
        "status": backfill.status,
        "total": backfill.total,
        "released": backfill.released,
        "already_recorded": backfill.already_recorded,
        "reprocessed": backfill.reprocessed,
        "runs": backfill_selectors.backfill_outcomes(backfill=backfill),
        "created_at": _iso(backfill.created_at),
        "completed_at": _iso(backfill.completed_at),
    }


def plan_output(plan: backfills.BackfillPlan) -> dict[str, Any]:
    return {
        "dry_run": True,
        "start": _iso(plan.start),
        "end": _iso(plan.end),
        "max_parallel": plan.max_parallel,
        "reprocess": plan.reprocess,
        "total": plan.total,
        "counts": plan.counts,
        "fires": [_fire_output(plan, at) for at in plan.fires],
        "fires_shown": len(plan.fires),
    }


def _fire_output(plan: backfills.BackfillPlan, at: datetime) -> dict[str, Any]:
    fire = (plan.plans or {}).get(at)
    return {
        "scheduled_at": _iso(at),
        "already_recorded": at in plan.already_recorded,
        "outcome": fire.outcome if fire else "new",
        "was": fire.was if fire else None,
    }


def _create(request: Request, **target: Any) -> Response:
    body = BackfillInput(data=request.data or {})
    body.is_valid(raise_exception=True)
    data = body.validated_data
    if data["dry_run"]:
        plan = backfills.backfill_plan(
            start=_when(data["start"], field="start"),
            end=_when(data["end"], field="end"),
            max_parallel=data["max_parallel"],
            reprocess=data["reprocess"],
            **target,
        )
        return Response(plan_output(plan))

    def create() -> Response:
        backfill = backfills.backfill_create(
            tenant=request_tenant(request),
            start=_when(data["start"], field="start"),
            end=_when(data["end"], field="end"),
            max_parallel=data["max_parallel"],
            reprocess=data["reprocess"],
            **target,
        )
        return Response(backfill_output(backfill), status=status.HTTP_201_CREATED)

    return idempotent(request, tenant=request_tenant(request), produce=create)


IDEMPOTENCY = OpenApiParameter(
    "Idempotency-Key", str, OpenApiParameter.HEADER, description="Repeat-safe create"
)


class TaskBackfillView(APIView):
    write_role = "operator"

    @extend_schema(
        request=BackfillInput, responses={201: OpenApiTypes.OBJECT}, parameters=[IDEMPOTENCY]
    )
    def post(self, request: Request, task_id: str) -> Response:
        task = task_selectors.task_get(tenant=request_tenant(request), task_id=task_id)
        return _create(request, task=task)


class DagBackfillView(APIView):
    write_role = "operator"

    @extend_schema(
        request=BackfillInput, responses={201: OpenApiTypes.OBJECT}, parameters=[IDEMPOTENCY]
    )
    def post(self, request: Request, dag_id: str) -> Response:
        dag = selectors.dag_get(tenant=request_tenant(request), dag_id=dag_id)
        return _create(request, dag=dag)


class BackfillListView(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("task", str, description="Task id"),
            OpenApiParameter("dag", str, description="DAG id"),
            OpenApiParameter("status", str, enum=["running", "completed", "cancelled"]),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request) -> Response:
        queryset = backfill_selectors.backfill_list(
            tenant=request_tenant(request), filters=request.query_params
        )
        paginator = PagePagination()
        page = paginator.paginate_queryset(queryset, request, view=self)
        return paginator.get_paginated_response([backfill_output(b) for b in page])


class BackfillDetailView(APIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request, backfill_id: str) -> Response:
        backfill = backfill_selectors.backfill_get(
            tenant=request_tenant(request), backfill_id=backfill_id
        )
        return Response(backfill_output(backfill))


class BackfillCancelView(APIView):
    write_role = "operator"

    @extend_schema(request=NoteInput, responses={200: OpenApiTypes.OBJECT})
    def post(self, request: Request, backfill_id: str) -> Response:
        note = body_note(request)
        backfill = backfill_selectors.backfill_get(
            tenant=request_tenant(request), backfill_id=backfill_id
        )
        return Response(backfill_output(backfills.backfill_cancel(backfill=backfill, note=note)))
