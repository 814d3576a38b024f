"""An operator's hand on one node of an ended DAG run: clear it (with its upstream and/or
downstream) or mark it succeeded or failed (`dags.services.node_actions`)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.dags.views import _run_detail
from api.strict import StrictSerializer
from api.tenancy import request_actor, request_tenant
from dags import selectors
from dags.models import DagRun
from dags.services.node_actions import MARK_STATES, MAX_NOTE, dag_node_clear, dag_node_mark


class ClearInput(StrictSerializer):
    upstream = serializers.BooleanField(required=False, default=False)
    downstream = serializers.BooleanField(required=False, default=False)
    note = serializers.CharField(max_length=MAX_NOTE, required=False, allow_blank=True, default="")


class MarkInput(StrictSerializer):
    state = serializers.ChoiceField(choices=sorted(MARK_STATES))
    note = serializers.CharField(max_length=MAX_NOTE, required=False, allow_blank=True, default="")


def _run(request: Request, run_id: str, dag_id: str | None) -> DagRun:
    """The run in the caller's tenant (another tenant's is a 404), by its DAG or by its id."""
    tenant = request_tenant(request)
    if dag_id is None:
        return selectors.dag_run_of_tenant(tenant=tenant, run_id=run_id)
    dag = selectors.dag_get(tenant=tenant, dag_id=dag_id)
    return selectors.dag_run_get(tenant=tenant, dag=dag, run_id=run_id)


class NodeClearView(APIView):
    write_role = "operator"

    @extend_schema(
        request=ClearInput,
        responses={
            202: OpenApiResponse(description="the run's detail and the node ids cleared"),
            404: OpenApiResponse(),
            409: OpenApiResponse(description="the DAG run has not ended"),
        },
    )
    def post(self, request: Request, run_id: str, node_id: str, dag_id: str | None = None):
        run = _run(request, run_id, dag_id)
        body = ClearInput(data=request.data or {})
        body.is_valid(raise_exception=True)
        cleared = dag_node_clear(
            run=run, node_id=node_id, actor=request_actor(request), **body.validated_data
        )
        run.refresh_from_db()
        return Response({**_run_detail(run), "cleared": cleared}, status=202)


class NodeMarkView(APIView):
    write_role = "operator"

    @extend_schema(
        request=MarkInput,
        responses={
            202: OpenApiResponse(description="the run's detail and the downstream node ids reset"),
            404: OpenApiResponse(),
            409: OpenApiResponse(
                description="the node is so already; or the run is going and the node is "
                "not queued or running"
            ),
        },
    )
    def post(self, request: Request, run_id: str, node_id: str, dag_id: str | None = None):
        run = _run(request, run_id, dag_id)
        body = MarkInput(data=request.data or {})
        body.is_valid(raise_exception=True)
        reset = dag_node_mark(
            run=run, node_id=node_id, actor=request_actor(request), **body.validated_data
        )
        run.refresh_from_db()
        return Response({**_run_detail(run), "reset": reset}, status=202)
