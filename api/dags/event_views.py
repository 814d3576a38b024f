"""`POST /api/v1/events` (operator; `Idempotency-Key` honoured) and `GET /api/v1/events`."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.idempotency import idempotent
from api.pagination import PagePagination
from api.strict import StrictSerializer
from api.tenancy import request_tenant
from dags import event_selectors
from dags.models import Event
from dags.services.events import event_post


class EventInput(StrictSerializer):
    name = serializers.CharField(max_length=255)
    payload = serializers.JSONField(required=False)


def event_output(event: Event) -> dict[str, Any]:
    return {
        "id": str(event.id),
        "name": event.name,
        "payload": event.payload,
        "created_at": event.created_at.isoformat().replace("+00:00", "Z"),
    }


class EventListView(APIView):
    write_role = "operator"

    @extend_schema(
        parameters=[OpenApiParameter("name", str, description="Only events of this name")],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request) -> Response:
        queryset = event_selectors.event_list(
            tenant=request_tenant(request), name=request.query_params.get("name") or None
        )
        paginator = PagePagination()
        page = paginator.paginate_queryset(queryset, request, view=self)
        return paginator.get_paginated_response([event_output(e) for e in page])

    @extend_schema(
        request=EventInput,
        responses={201: OpenApiTypes.OBJECT},
        parameters=[
            OpenApiParameter(
                "Idempotency-Key", str, OpenApiParameter.HEADER, description="Post once"
            )
        ],
    )
    def post(self, request: Request) -> Response:
        tenant = request_tenant(request)
        body = EventInput(data=request.data)
        body.is_valid(raise_exception=True)

        def post() -> Response:
            posted = event_post(
                tenant=tenant,
                name=body.validated_data["name"],
                payload=body.validated_data.get("payload"),
            )
            return Response(
                {
                    **event_output(posted.event),
                    "released": [
                        {"dag_run_id": str(wait.run_id), "node_id": wait.node_id}
                        for wait in posted.released
                    ],
                    "started": posted.started,
                },
                status=status.HTTP_201_CREATED,
            )

        return idempotent(request, tenant=tenant, produce=post)
