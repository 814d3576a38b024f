"""Audit log, usage and quotas, secrets, API keys and members of the caller's tenant (the
invitations: views_invitations)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.pagination import PagePagination
from api.schema import page_of
from api.serializers_access import (
    ApiKeyCreatedOutput,
    ApiKeyInput,
    ApiKeyOutput,
    AuditOutput,
    InvitationCreatedOutput,
    InvitationInput,
    MemberOutput,
    MemberRoleInput,
    SecretInput,
    SecretOutput,
    SecretUpdateInput,
    UsageOutput,
)
from api.strict import refuse_body
from api.tenancy import request_tenant
from api.usage_budgets import usage_budgets
from api.views_invitations import invitation_create_response
from api.views_operations import admin_scope
from scheduler_app import selectors
from scheduler_app.services import api_keys, members, quotas, secrets
from scheduler_app.services.log_quota import log_bytes_used


def _page(request: Request, view: APIView, queryset, serializer) -> Response:
    paginator = PagePagination()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer(page, many=True).data)


class AuditListView(APIView):
    read_role = "admin"
    staff_all_tenants = True

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "verb", str, description='What was done, e.g. "task.pause" (old entries too)'
            ),
            OpenApiParameter("action", str, description="The stored action, exactly"),
            OpenApiParameter("actor", str),
            OpenApiParameter("object_type", str),
            OpenApiParameter("object_id", str),
            OpenApiParameter("tenant", str, description="Platform staff: one tenant's slug"),
        ],
        responses=page_of(AuditOutput),
    )
    def get(self, request: Request) -> Response:
        entries = selectors.audit_list(tenant=admin_scope(request), filters=request.query_params)
        return _page(request, self, entries.select_related("tenant"), AuditOutput)


class TenantUsageView(APIView):
    @extend_schema(responses=UsageOutput)
    def get(self, request: Request) -> Response:
        tenant = request_tenant(request)
        usage = quotas.tenant_usage(tenant=tenant)
        return Response(
            {
                "tenant": tenant.slug,
                "usage": {
                    "concurrent_runs": usage.concurrent_runs,
                    "runs_this_hour": usage.runs_this_hour,
                    "compute_minutes_this_month": usage.compute_minutes_this_month,
                    "log_bytes": log_bytes_used(tenant_id=tenant.id, fresh=True),
                },
                "quota": {
                    "max_concurrent_runs": tenant.max_concurrent_runs,
                    "max_runs_per_hour": tenant.max_runs_per_hour,
                    "max_compute_minutes_per_month": tenant.max_compute_minutes_per_month,
                    "max_log_bytes": tenant.max_log_bytes,
                },
                "rate_limit_per_minute": tenant.rate_limit_per_minute,
                "budgets": usage_budgets(tenant=tenant),
            }
        )


class SecretListView(APIView):
    read_role = "admin"
    write_role = "admin"

    @extend_schema(responses=page_of(SecretOutput))
    def get(self, request: Request) -> Response:
        return _page(
            request, self, selectors.secret_list(tenant=request_tenant(request)), SecretOutput
        )

    @extend_schema(request=SecretInput, responses={201: SecretOutput})
    def post(self, request: Request) -> Response:
        body = SecretInput(data=request.data)
        body.is_valid(raise_exception=True)
        secret = secrets.secret_create(tenant=request_tenant(request), **body.validated_data)
        return Response(SecretOutput(secret).data, status=status.HTTP_201_CREATED)


class SecretDetailView(APIView):
    read_role = "admin"
    write_role = "admin"

    @extend_schema(responses=SecretOutput)
    def get(self, request: Request, secret_id: str) -> Response:
        secret = selectors.secret_get(tenant=request_tenant(request), secret_id=secret_id)
        return Response(SecretOutput(secret).data)

    @extend_schema(request=SecretUpdateInput, responses=SecretOutput)
    def put(self, request: Request, secret_id: str) -> Response:
        secret = selectors.secret_get(tenant=request_tenant(request), secret_id=secret_id)
        body = SecretUpdateInput(data=request.data)
        body.is_valid(raise_exception=True)
        secret = secrets.secret_update(
            secret=secret,
            value=body.validated_data.get("value"),
            description=body.validated_data.get("description"),
        )
        return Response(SecretOutput(secret).data)

    @extend_schema(request=SecretUpdateInput, responses=SecretOutput)
    def patch(self, request: Request, secret_id: str) -> Response:
        return self.put(request, secret_id)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, secret_id: str) -> Response:
        secret = selectors.secret_get(tenant=request_tenant(request), secret_id=secret_id)
        refuse_body(request)
        secrets.secret_delete(secret=secret)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ApiKeyListView(APIView):
    read_role = "admin"
    write_role = "admin"

    @extend_schema(responses=page_of(ApiKeyOutput))
    def get(self, request: Request) -> Response:
        return _page(
            request, self, selectors.api_key_list(tenant=request_tenant(request)), ApiKeyOutput
        )

    @extend_schema(request=ApiKeyInput, responses={201: ApiKeyCreatedOutput})
    def post(self, request: Request) -> Response:
        body = ApiKeyInput(data=request.data)
        body.is_valid(raise_exception=True)
        user = request.user if getattr(request.user, "pk", None) else None
        key, raw_key = api_keys.api_key_create(
            tenant=request_tenant(request), created_by=user, **body.validated_data
        )
        data = ApiKeyOutput(key).data
        data["key"] = raw_key
        return Response(data, status=status.HTTP_201_CREATED)


class ApiKeyDetailView(APIView):
    read_role = "admin"
    write_role = "admin"

    @extend_schema(responses=ApiKeyOutput)
    def get(self, request: Request, key_id: str) -> Response:
        key = selectors.api_key_get(tenant=request_tenant(request), key_id=key_id)
        return Response(ApiKeyOutput(key).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, key_id: str) -> Response:
        """Revoke: the key stops working at once; the record stays for the audit."""
        key = selectors.api_key_get(tenant=request_tenant(request), key_id=key_id)
        refuse_body(request)
        api_keys.api_key_revoke(key=key)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MemberListView(APIView):
    read_role = "admin"
    write_role = "admin"

    @extend_schema(responses=page_of(MemberOutput))
    def get(self, request: Request) -> Response:
        return _page(
            request, self, selectors.member_list(tenant=request_tenant(request)), MemberOutput
        )

    @extend_schema(request=InvitationInput, responses={201: InvitationCreatedOutput})
    def post(self, request: Request) -> Response:
        """Invite someone: a single-use token, mailed to `email` or returned once here. Whoever
        accepts it chooses their own account; no account is named or created here."""
        return invitation_create_response(request)


class MemberDetailView(APIView):
    read_role = "admin"
    write_role = "admin"

    @extend_schema(responses=MemberOutput)
    def get(self, request: Request, member_id: str) -> Response:
        member = selectors.member_get(tenant=request_tenant(request), member_id=member_id)
        return Response(MemberOutput(member).data)

    @extend_schema(request=MemberRoleInput, responses=MemberOutput)
    def patch(self, request: Request, member_id: str) -> Response:
        member = selectors.member_get(tenant=request_tenant(request), member_id=member_id)
        body = MemberRoleInput(data=request.data)
        body.is_valid(raise_exception=True)
        member = members.member_set_role(member=member, role=body.validated_data["role"])
        return Response(MemberOutput(member).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, member_id: str) -> Response:
        member = selectors.member_get(tenant=request_tenant(request), member_id=member_id)
        refuse_body(request)
        members.member_remove(member=member)
        return Response(status=status.HTTP_204_NO_CONTENT)
