"""Thin views of /api/v1/incidents: a tenant's alert incidents, acknowledge and resolve.

Reading is for every member; acknowledging and resolving for operators and admins (the
dashboard's buttons follow these rules, dashboard/roles.py). The services audit each change
in words (the audit middleware leaves these routes to them)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from alerting import selectors as alerting_selectors
from alerting.models import AlertIncident, IncidentState
from alerting.services import incidents
from api.pagination import PagePagination
from api.schema import page_of
from api.serializers_incidents import IncidentOutput, IncidentResolveInput
from api.strict import refuse_body
from api.tenancy import request_access, request_tenant
from scheduler_app.errors import ValidationFailed


def _output(request: Request, rows: list[AlertIncident]) -> list[dict]:
    subjects = alerting_selectors.incident_subjects(tenant=request_tenant(request), incidents=rows)
    return IncidentOutput(rows, many=True, context={"subjects": subjects}).data


class IncidentListView(APIView):
    read_role = "viewer"

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "state", str, enum=IncidentState.values, description="only incidents in this state"
            )
        ],
        responses=page_of(IncidentOutput),
    )
    def get(self, request: Request) -> Response:
        state = request.query_params.get("state") or None
        if state is not None and state not in IncidentState.values:
            raise ValidationFailed(
                f"state must be one of {', '.join(IncidentState.values)}", field="state"
            )
        paginator = PagePagination()
        queryset = alerting_selectors.incident_list(tenant=request_tenant(request), state=state)
        page = paginator.paginate_queryset(queryset, request, view=self)
        return paginator.get_paginated_response(_output(request, list(page)))


class IncidentDetailView(APIView):
    read_role = "viewer"

    @extend_schema(responses=IncidentOutput)
    def get(self, request: Request, incident_id: str) -> Response:
        incident = alerting_selectors.incident_get(
            tenant=request_tenant(request), incident_id=incident_id
        )
        return Response(_output(request, [incident])[0])


class IncidentAcknowledgeView(APIView):
    write_role = "operator"

    @extend_schema(request=None, responses=IncidentOutput)
    def post(self, request: Request, incident_id: str) -> Response:
        incident = alerting_selectors.incident_get(
            tenant=request_tenant(request), incident_id=incident_id
        )
        refuse_body(request)
        incident = incidents.incident_acknowledge(
            incident=incident, actor=request_access(request).actor
        )
        return Response(_output(request, [incident])[0])


class IncidentResolveView(APIView):
    write_role = "operator"

    @extend_schema(request=IncidentResolveInput, responses=IncidentOutput)
    def post(self, request: Request, incident_id: str) -> Response:
        incident = alerting_selectors.incident_get(
            tenant=request_tenant(request), incident_id=incident_id
        )
        body = IncidentResolveInput(data=request.data)
        body.is_valid(raise_exception=True)
        incident = incidents.incident_resolve_by_hand(
            incident=incident,
            actor=request_access(request).actor,
            note=body.validated_data.get("note", ""),
        )
        return Response(_output(request, [incident])[0])
