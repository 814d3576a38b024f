"""Member invitations: an admin issues and revokes them; anyone holding a token accepts it.

POST /members (views_access.MemberListView) issues one, through `invitation_create_response`;
GET /members/invitations lists them (never a token); DELETE /members/invitations/<id>
revokes one. POST /invitations/accept is public: the token is the credential. Signed out,
it creates the invitee's account with the user name and password they send; signed in, it
adds their own account. scheduler_app/services/invitations.py says why.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.pagination import PagePagination
from api.schema import page_of
from api.serializers_access import (
    InvitationAcceptedOutput,
    InvitationAcceptInput,
    InvitationInput,
    InvitationOutput,
)
from api.strict import refuse_body
from api.tenancy import request_access, request_tenant
from scheduler_app import selectors
from scheduler_app.errors import ValidationFailed
from scheduler_app.services import invitations


def invitation_create_response(request: Request) -> Response:
    body = InvitationInput(data=request.data)
    body.is_valid(raise_exception=True)
    email = body.validated_data.get("email", "")
    issued = invitations.invitation_create(
        tenant=request_tenant(request),
        role=body.validated_data["role"],
        email=email,
        invited_by=request_access(request).actor,
        # A mailed link carries the configured address, never this request's Host header.
        link_for=invitations.emailed_link
        if email
        else lambda t: request.build_absolute_uri(invitations.join_path(t)),
    )
    data = InvitationOutput(issued.invitation).data
    data.update(delivery="email" if email else "link", token=issued.token, accept_url=issued.link)
    return Response(data, status=status.HTTP_201_CREATED)


class TenantInvitationListView(APIView):
    read_role = "admin"

    @extend_schema(responses=page_of(InvitationOutput))
    def get(self, request: Request) -> Response:
        paginator = PagePagination()
        rows = selectors.invitation_list(tenant=request_tenant(request))
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(InvitationOutput(page, many=True).data)


class TenantInvitationDetailView(APIView):
    read_role = "admin"
    write_role = "admin"

    @extend_schema(responses=InvitationOutput)
    def get(self, request: Request, invitation_id: str) -> Response:
        invitation = selectors.invitation_get(
            tenant=request_tenant(request), invitation_id=invitation_id
        )
        return Response(InvitationOutput(invitation).data)

    @extend_schema(responses={204: None, 409: OpenApiResponse(description="already used")})
    def delete(self, request: Request, invitation_id: str) -> Response:
        """Revoke: its token stops working at once."""
        refuse_body(request)
        invitations.invitation_revoke(
            tenant=request_tenant(request),
            invitation_id=invitation_id,
            actor=request_access(request).actor,
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class InvitationAcceptView(APIView):
    """Public: the token is the credential (an invitee has no membership yet, maybe no
    account). An API key is a machine, and never joins (403)."""

    token_scoped = True

    @extend_schema(
        request=InvitationAcceptInput,
        responses={
            200: InvitationAcceptedOutput,
            201: InvitationAcceptedOutput,
            404: OpenApiResponse(description="no invitation has this token"),
            409: OpenApiResponse(description="user name taken, or already a member"),
            410: OpenApiResponse(description="used, revoked or expired"),
        },
    )
    def post(self, request: Request) -> Response:
        body = InvitationAcceptInput(data=request.data)
        body.is_valid(raise_exception=True)
        values = body.validated_data
        signed_in = bool(request.user and request.user.is_authenticated)
        if signed_in:
            for field in ("username", "password"):
                if field in values:
                    raise ValidationFailed(
                        "you are signed in: you accept with your own account (sign out to "
                        "create a new one)",
                        field=field,
                    )
            membership = invitations.invitation_accept_signed_in(
                token=values["token"], user=request.user
            )
        else:
            membership = invitations.invitation_accept_new_account(
                token=values["token"],
                username=values.get("username"),
                password=values.get("password"),
            )
        return Response(
            {
                "tenant": membership.tenant.slug,
                "username": membership.user.get_username(),
                "role": membership.role,
                "member_id": membership.id,
                "new_account": not signed_in,
            },
            status=status.HTTP_200_OK if signed_in else status.HTTP_201_CREATED,
        )
