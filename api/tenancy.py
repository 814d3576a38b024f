"""Which tenant a request acts for, and with which role.

A user acts through a membership (the X-Tenant header picks among several); an API key
acts for its own tenant with the role it was given; an identity provider's access token
for the tenants and roles its groups map to (api/oidc_auth.py), X-Tenant picking again.
Cached on the Django request so the permission class, the throttle, the views and the audit
middleware resolve it once.
"""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request

from api.oidc_auth import ProviderToken
from scheduler_app.choices import Role
from scheduler_app.models import ApiKey, Tenant, TenantMembership

TENANT_HEADER = "HTTP_X_TENANT"
ROLE_RANK = {Role.VIEWER.value: 1, Role.OPERATOR.value: 2, Role.ADMIN.value: 3}


@dataclass(frozen=True)
class Access:
    tenant: Tenant
    role: str
    actor: str  # how the audit log names the caller
    api_key: ApiKey | None = None

    def allows(self, role: str) -> bool:
        return ROLE_RANK[self.role] >= ROLE_RANK[role]


def _django_request(request: Request):
    return getattr(request, "_request", request)


def request_access(request: Request) -> Access:
    raw = _django_request(request)
    cached = getattr(raw, "tenant_access", None)
    if cached is not None:
        return cached
    if isinstance(request.auth, ApiKey):
        key = request.auth
        access = Access(tenant=key.tenant, role=key.role, actor=f"apikey:{key.prefix}", api_key=key)
    elif isinstance(request.auth, ProviderToken):
        access = _provider_access(request, request.auth)
    else:
        access = _membership_access(request)
    raw.tenant_access = access
    return access


def _membership_access(request: Request) -> Access:
    # The user's memberships in every tenant (which tenant is asked for is decided below):
    # the user is the scope.
    memberships = TenantMembership.platform.select_related("tenant").filter(
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
    return Access(
        tenant=membership.tenant, role=membership.role, actor=f"user:{request.user.get_username()}"
    )


def _provider_access(request: Request, token: ProviderToken) -> Access:
    wanted = request.META.get(TENANT_HEADER)
    grants = [(t, role) for t, role in token.grants if not wanted or t.slug == wanted]
    if not grants:
        raise PermissionDenied(
            "your identity provider groups give no role in any active tenant"
            if not wanted
            else f"your identity provider groups give no role in tenant {wanted!r}"
        )
    tenant, role = grants[0]
    return Access(tenant=tenant, role=role, actor=f"user:{request.user.get_username()}")


def request_tenant(request: Request) -> Tenant:
    return request_access(request).tenant


def is_platform_staff(request: Request) -> bool:
    user = request.user
    return bool(getattr(user, "is_staff", False)) and not isinstance(request.auth, ApiKey)


def request_actor(request: Request) -> str:
    """How the caller is named where a write keeps who made it ("user:alice", "apikey:ab12")."""
    return request_access(request).actor
