"""Which tenant a request acts for: the caller's membership (X-Tenant picks among several)."""

from __future__ import annotations

from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request

from scheduler_app.models import Tenant, TenantMembership

TENANT_HEADER = "HTTP_X_TENANT"


def request_membership(request: Request) -> TenantMembership:
    cached = getattr(request, "_tenant_membership", None)
    if cached is not None:
        return cached
    memberships = TenantMembership.objects.select_related("tenant").filter(
        user=request.user, tenant__is_active=True
    )
    wanted = request.META.get(TENANT_HEADER)
    if wanted:
        memberships = memberships.filter(tenant__slug=wanted)
    membership = memberships.order_by("created_at").first()
    if membership is None:
        raise PermissionDenied(
            "you are not a member of any active tenant"
            if not wanted
            else f"you are not a member of tenant {wanted!r}"
        )
    request._tenant_membership = membership
    return membership


def request_tenant(request: Request) -> Tenant:
    return request_membership(request).tenant
