"""A run's checkpoint, a task's resource usage, and the over-provisioned bulk tasks (thin:
the selectors do the work, and take the tenant)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.serializers_usage import (
    CheckpointOutput,
    OverprovisionedTaskOutput,
    ResourceUsageOutput,
)
from api.tenancy import request_tenant
from api.views_operations import admin_scope
from scheduler_app import selectors
from scheduler_app.errors import NotFound
from scheduler_app.selectors.checkpoints import execution_checkpoint_get
from scheduler_app.selectors.resource_usage import overprovisioned_tasks, task_resource_usage


class ExecutionCheckpointView(APIView):
    """The content of a run's checkpoint, for its own tenant only (another tenant's
    execution id is a 404, as is a run without a checkpoint)."""

    @extend_schema(
        responses={
            200: CheckpointOutput,
            404: OpenApiResponse(description="no such execution in the tenant, or no checkpoint"),
        }
    )
    def get(self, request: Request, execution_id: str) -> Response:
        tenant = request_tenant(request)
        execution = selectors.execution_get(tenant=tenant, execution_id=execution_id)
        checkpoint = execution_checkpoint_get(tenant=tenant, execution=execution)
        if checkpoint is None:
            raise NotFound("this run has no checkpoint")
        # Stored masked: the worker masks the run's secrets before it saves (secrets are
        # decrypted only there, so this process could not mask them again).
        file_text = None
        if checkpoint.file_data is not None:
            file_text = bytes(checkpoint.file_data).decode("utf-8", "replace")
        return Response(
            CheckpointOutput(
                {
                    "execution_id": execution.id,
                    "chain_id": checkpoint.chain_id,
                    "saved_by_execution_id": checkpoint.execution_id,
                    "attempt": checkpoint.attempt,
                    "size_bytes": checkpoint.size_bytes,
                    "saves": checkpoint.saves,
                    "updated_at": checkpoint.updated_at,
                    "state": checkpoint.state,
                    "file_text": file_text,
                }
            ).data
        )


class TaskResourceUsageView(APIView):
    @extend_schema(
        responses={
            200: ResourceUsageOutput,
            404: OpenApiResponse(description="no such task in the tenant"),
        }
    )
    def get(self, request: Request, task_id: str) -> Response:
        tenant = request_tenant(request)
        task = selectors.task_get(tenant=tenant, task_id=task_id)
        return Response(ResourceUsageOutput(task_resource_usage(tenant=tenant, task=task)).data)


class OverprovisionedTasksView(APIView):
    """Bulk-tier tasks whose runs use a tenth or less of what they ask (docs/tasks/sizing.md):
    the tenant's own; platform staff see every tenant's (or one's, with ?tenant=slug)."""

    staff_all_tenants = True

    @extend_schema(
        parameters=[OpenApiParameter("tenant", str, description="Platform staff: one tenant")],
        responses={200: OverprovisionedTaskOutput(many=True)},
    )
    def get(self, request: Request) -> Response:
        listed = overprovisioned_tasks(tenant=admin_scope(request))
        return Response(
            OverprovisionedTaskOutput(
                [
                    {
                        "task_id": item["task"].id,
                        "task_name": item["task"].name,
                        "tenant": item["task"].tenant.slug,
                        "priority": item["task"].priority,
                        "usage": item["usage"],
                        "used_share": item["used_share"],
                    }
                    for item in listed
                ],
                many=True,
            ).data
        )
