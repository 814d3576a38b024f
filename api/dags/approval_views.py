"""Approvals through the API: the tenant's pending approvals, one approval, and a decision.

    GET  /api/v1/approvals[?status=waiting|approved|rejected|skipped|cancelled]
    GET  /api/v1/approvals/{id}
    POST /api/v1/approvals/{id}/approve|reject                           {"comment": "..."}
    POST /api/v1/dags/{dag}/executions/{run}/nodes/{node}/approve|reject {"comment": "..."}

A decision is a person's: an API key (a machine) is refused, whatever its role; a viewer is
refused by the role rule (operator). The service decides the rest (dags.services.approvals).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.pagination import PagePagination
from api.strict import StrictSerializer
from api.tenancy import request_access, request_tenant
from dags import approval_selectors, selectors
from dags.approval_models import ApprovalWait
from dags.choices import ApprovalInterface
from dags.services.approvals import MAX_COMMENT, approval_decide
from scheduler_app.errors import Forbidden
from scheduler_app.models import Tenant


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def approval_output(wait: ApprovalWait) -> dict[str, Any]:
    decisions = list(wait.decisions.all())
    return {
        "id": str(wait.id),
        "dag_id": str(wait.run.dag_id),
        "dag": wait.run.dag.name,
        "dag_run_id": str(wait.run_id),
        "node_id": wait.node_id,
        "attempt": wait.attempt_number,
        "status": wait.status,
        "message": wait.message,
        "approvers": {"role": wait.role or None, "users": wait.usernames, "count": wait.required},
        "approvals": sum(d.verdict == "approve" for d in decisions),
        "on_timeout": wait.on_timeout,
        "started_at": _iso(wait.started_at),
        "deadline": _iso(wait.deadline),
        "resolved_at": _iso(wait.resolved_at),
        "triggered_by": wait.run.triggered_by,
        "decisions": [
            {
                "user": d.username,
                "verdict": d.verdict,
                "comment": d.comment,
                "via": d.via,
                "decided_at": _iso(d.decided_at),
            }
            for d in decisions
        ],
    }


class DecisionInput(StrictSerializer):
    comment = serializers.CharField(
        max_length=MAX_COMMENT, required=False, allow_blank=True, default=""
    )
    # Which client asked (schedctl says "cli"): what the audit log and the run page show.
    via = serializers.ChoiceField(
        choices=[ApprovalInterface.API.value, ApprovalInterface.CLI.value],
        required=False,
        default=ApprovalInterface.API.value,
    )


def _decide(request: Request, find: Callable[[Tenant], ApprovalWait], verdict: str) -> Response:
    """The body is checked before the approval is looked up (a bad body is a 400 whatever
    the ids), then who asks, then the service decides."""
    body = DecisionInput(data=request.data or {})
    body.is_valid(raise_exception=True)
    access = request_access(request)
    wait = find(access.tenant)
    if access.api_key is not None:
        raise Forbidden("an approval is a person's decision: sign in as a user, not an API key")
    decided = approval_decide(
        wait_id=wait.id,
        user=request.user,
        verdict=verdict,
        comment=body.validated_data["comment"],
        via=body.validated_data["via"],
    )
    wait = approval_selectors.approval_get(tenant=access.tenant, approval_id=decided.wait.id)
    response = Response({**approval_output(wait), "released": decided.released})
    response.audit_object_id = str(wait.id)
    return response


class ApprovalListView(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("status", str, description="Default: waiting")],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request) -> Response:
        queryset = approval_selectors.approval_list(
            tenant=request_tenant(request),
            status=request.query_params.get("status", "waiting") or None,
        )
        paginator = PagePagination()
        page = paginator.paginate_queryset(queryset, request, view=self)
        return paginator.get_paginated_response([approval_output(w) for w in page])


class ApprovalDetailView(APIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request, approval_id: str) -> Response:
        wait = approval_selectors.approval_get(
            tenant=request_tenant(request), approval_id=approval_id
        )
        return Response(approval_output(wait))


class ApprovalDecideView(APIView):
    write_role = "operator"
    verdict = "approve"

    @extend_schema(request=DecisionInput, responses={200: OpenApiTypes.OBJECT})
    def post(self, request: Request, approval_id: str) -> Response:
        def find(tenant: Tenant) -> ApprovalWait:
            return approval_selectors.approval_get(tenant=tenant, approval_id=approval_id)

        return _decide(request, find, self.verdict)


class NodeDecideView(APIView):
    write_role = "operator"
    verdict = "approve"

    @extend_schema(request=DecisionInput, responses={200: OpenApiTypes.OBJECT})
    def post(self, request: Request, dag_id: str, run_id: str, node_id: str) -> Response:
        def find(tenant: Tenant) -> ApprovalWait:
            dag = selectors.dag_get(tenant=tenant, dag_id=dag_id)
            run = selectors.dag_run_get(tenant=tenant, dag=dag, run_id=run_id)
            return approval_selectors.approval_of_node(tenant=tenant, run=run, node_id=node_id)

        return _decide(request, find, self.verdict)
