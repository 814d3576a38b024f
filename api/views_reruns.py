"""Re-running an ended run, with its parameters or edited ones (`runs.reruns`)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.idempotency import idempotent
from api.strict import StrictSerializer
from api.tenancy import request_actor, request_tenant
from runs.reruns import MAX_NOTE, execution_rerun
from scheduler_app import selectors


class RerunInput(StrictSerializer):
    # Absent: the run's own parameters; given: they replace them (validated as a trigger's).
    parameters = serializers.DictField(required=False)
    note = serializers.CharField(max_length=MAX_NOTE, required=False, allow_blank=True, default="")


class RerunOutput(serializers.Serializer):
    execution_id = serializers.UUIDField()
    rerun_of = serializers.UUIDField()
    status = serializers.CharField()
    parameters = serializers.DictField(allow_null=True)


class ExecutionRerunView(APIView):
    write_role = "operator"

    @extend_schema(
        request=RerunInput,
        responses={
            202: RerunOutput,
            400: OpenApiResponse(description="bad parameters (the field is named)"),
            404: OpenApiResponse(),
            409: OpenApiResponse(description="the run has not ended, or is a DAG node's"),
        },
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="Repeat-safe: the same key re-runs once",
            )
        ],
    )
    def post(self, request: Request, execution_id: str) -> Response:
        tenant = request_tenant(request)
        execution = selectors.execution_get(tenant=tenant, execution_id=execution_id)
        body = RerunInput(data=request.data or {})
        body.is_valid(raise_exception=True)

        def rerun() -> Response:
            made = execution_rerun(
                execution=execution,
                parameters=body.validated_data.get("parameters"),
                note=body.validated_data["note"],
                actor=request_actor(request),
            )
            return Response(
                {
                    "execution_id": str(made.id),
                    "rerun_of": str(execution.id),
                    "status": made.status,
                    "parameters": made.parameters,
                },
                status=status.HTTP_202_ACCEPTED,
            )

        return idempotent(request, tenant=tenant, produce=rerun)
