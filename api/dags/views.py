"""Thin DRF views for DAGs: the body of POST/PUT is the definition itself (JSON)."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.dags.approval_views import approval_output
from api.dags.serializers import (
    DagOutput,
    DagRunDetailOutput,
    DagRunOutput,
    DagSavedOutput,
    DagTriggerInput,
    NodeOutput,
)
from api.dags.timer_output import timers_output
from api.pagination import PagePagination
from api.schema import page_of
from api.serializers import PauseInput
from api.strict import NoteInput, body_note, refuse_body
from api.tenancy import request_actor, request_tenant
from dags import selectors
from dags.approval_selectors import approval_waits_of_run
from dags.attempt_selectors import dag_run_node_attempts
from dags.event_selectors import event_waits_of_run
from dags.services import definitions, runs
from dags.timer_selectors import timers_of_run
from scheduler_app.fleet.capabilities import task_warnings


def _dag_output(dag) -> dict:
    version = selectors.dag_version_get(dag=dag)
    return DagOutput(dag, context={"versions": {dag.id: version}}).data


def _dag_saved_output(dag) -> dict:
    """The saved DAG with `warnings`: nodes whose handler type no live worker offers."""
    version = selectors.dag_version_get(dag=dag)
    warnings = []
    for node in version.spec["tasks"] if version is not None else []:
        handler = node.get("handler")
        if handler is None:
            continue
        config = {"type": "python"} if isinstance(handler, str) else handler
        warnings += [f"task {node['id']!r}: {warning}" for warning in task_warnings(config)]
    context = {"versions": {dag.id: version}, "warnings": warnings}
    return DagSavedOutput(dag, context=context).data


class DagListView(APIView):
    write_role = "admin"

    @extend_schema(responses=page_of(DagOutput))
    def get(self, request: Request) -> Response:
        queryset = selectors.dag_list(tenant=request_tenant(request))
        paginator = PagePagination()
        page = paginator.paginate_queryset(queryset, request, view=self)
        return paginator.get_paginated_response(DagOutput(page, many=True).data)

    @extend_schema(request=OpenApiTypes.OBJECT, responses={201: DagSavedOutput})
    def post(self, request: Request) -> Response:
        dag = definitions.dag_create(tenant=request_tenant(request), raw=request.data)
        return Response(_dag_saved_output(dag), status=status.HTTP_201_CREATED)


class DagDetailView(APIView):
    write_role = "admin"

    @extend_schema(responses=DagOutput)
    def get(self, request: Request, dag_id: str) -> Response:
        dag = selectors.dag_get(tenant=request_tenant(request), dag_id=dag_id)
        return Response(_dag_output(dag))

    @extend_schema(request=OpenApiTypes.OBJECT, responses=DagSavedOutput)
    def put(self, request: Request, dag_id: str) -> Response:
        dag = selectors.dag_get(tenant=request_tenant(request), dag_id=dag_id)
        dag = definitions.dag_update(dag=dag, raw=request.data)
        return Response(_dag_saved_output(dag))

    @extend_schema(request=NoteInput, responses={204: None})
    def delete(self, request: Request, dag_id: str) -> Response:
        dag = selectors.dag_get(tenant=request_tenant(request), dag_id=dag_id)
        definitions.dag_delete(dag=dag, note=body_note(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class DagTriggerView(APIView):
    write_role = "operator"

    @extend_schema(request=DagTriggerInput, responses={202: DagRunOutput})
    def post(self, request: Request, dag_id: str) -> Response:
        dag = selectors.dag_get(tenant=request_tenant(request), dag_id=dag_id)
        body = DagTriggerInput(data=request.data or {})
        body.is_valid(raise_exception=True)
        run = runs.dag_trigger(
            dag=dag,
            parameters=body.validated_data.get("parameters"),
            triggered_by=request_actor(request),
        )
        return Response(DagRunOutput(run).data, status=status.HTTP_202_ACCEPTED)


class DagPauseView(APIView):
    write_role = "operator"
    paused = True

    @extend_schema(request=PauseInput, responses=DagOutput)
    def post(self, request: Request, dag_id: str) -> Response:
        dag = selectors.dag_get(tenant=request_tenant(request), dag_id=dag_id)
        body = PauseInput(data=request.data)
        body.is_valid(raise_exception=True)
        paused = definitions.dag_set_paused(
            dag=dag,
            paused=True,
            note=body.validated_data.get("note", ""),
            paused_by=request_actor(request),
        )
        return Response(_dag_output(paused))


class DagResumeView(APIView):
    write_role = "operator"

    @extend_schema(request=None, responses=DagOutput)
    def post(self, request: Request, dag_id: str) -> Response:
        dag = selectors.dag_get(tenant=request_tenant(request), dag_id=dag_id)
        refuse_body(request)
        return Response(_dag_output(definitions.dag_set_paused(dag=dag, paused=False)))


class DagRunListView(APIView):
    @extend_schema(responses=page_of(DagRunOutput))
    def get(self, request: Request, dag_id: str) -> Response:
        tenant = request_tenant(request)
        dag = selectors.dag_get(tenant=tenant, dag_id=dag_id)
        paginator = PagePagination()
        page = paginator.paginate_queryset(
            selectors.dag_run_list(tenant=tenant, dag=dag), request, view=self
        )
        return paginator.get_paginated_response(DagRunOutput(page, many=True).data)


def _run_detail(run) -> dict:
    nodes = selectors.dag_run_nodes(run=run)
    history = dag_run_node_attempts(run=run, nodes=nodes)
    return {
        **DagRunOutput(run).data,
        "nodes": NodeOutput(nodes, many=True, context={"history": history}).data,
        "event_waits": [_event_wait(wait) for wait in event_waits_of_run(run=run)],
        "timers": timers_output(timers_of_run(run=run), now=timezone.now()),
        "approvals": [approval_output(wait) for wait in approval_waits_of_run(run=run)],
    }


def _event_wait(wait) -> dict:
    def iso(moment):
        return moment.isoformat().replace("+00:00", "Z") if moment else None

    return {
        "node_id": wait.node_id,
        "name": wait.name,
        "match": wait.match,
        "status": wait.status,
        "started_at": iso(wait.started_at),
        "deadline": iso(wait.deadline),
        "event_id": str(wait.event_id) if wait.event_id else None,
        "resolved_at": iso(wait.resolved_at),
    }


class DagRunDetailView(APIView):
    @extend_schema(responses=DagRunDetailOutput)
    def get(self, request: Request, dag_id: str, run_id: str) -> Response:
        tenant = request_tenant(request)
        dag = selectors.dag_get(tenant=tenant, dag_id=dag_id)
        return Response(_run_detail(selectors.dag_run_get(tenant=tenant, dag=dag, run_id=run_id)))


class DagRunCancelView(APIView):
    write_role = "operator"

    @extend_schema(request=NoteInput, responses=DagRunDetailOutput)
    def post(self, request: Request, dag_id: str, run_id: str) -> Response:
        tenant = request_tenant(request)
        dag = selectors.dag_get(tenant=tenant, dag_id=dag_id)
        run = selectors.dag_run_get(tenant=tenant, dag=dag, run_id=run_id)
        run = runs.dag_run_cancel(run=run, note=body_note(request))
        return Response(_run_detail(run))


class DagRunRetryView(APIView):
    write_role = "operator"

    @extend_schema(request=None, responses={202: DagRunDetailOutput})
    def post(self, request: Request, dag_id: str, run_id: str) -> Response:
        tenant = request_tenant(request)
        dag = selectors.dag_get(tenant=tenant, dag_id=dag_id)
        run = selectors.dag_run_get(tenant=tenant, dag=dag, run_id=run_id)
        refuse_body(request)
        run = runs.dag_run_rerun(run=run, triggered_by=request_actor(request))
        return Response(_run_detail(run), status=status.HTTP_202_ACCEPTED)
