"""The one permission class, the DRF default for every view (present and future).

A view declares what it needs with class attributes, nothing else:
- `write_role`: role needed for unsafe methods, "operator" or "admin" (default "admin",
  so a view that forgets to say is admin-only rather than open); a dict maps a method to
  a role when one view mixes both (`{"POST": "operator", "DELETE": "admin"}`).
- `read_role`: role needed for safe methods (default "viewer").
- `platform_staff_only = True`: only platform staff (`is_staff` users), e.g. failover.
- `staff_all_tenants = True`: platform staff may call it without a membership and see
  every tenant (admin endpoints); everyone else sees their own tenant only.
- `token_scoped = True`: anyone, signed in or not, but never an API key: the request's body
  carries the credential (an invitation's token), which the view checks.

The dashboard's pages and buttons name the API view and method they stand for and are
allowed or refused by the same rules (dashboard/roles.py).
"""

from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from api.tenancy import ROLE_RANK, is_platform_staff, request_access
from scheduler_app.choices import Role
from scheduler_app.models import ApiKey


def role_allows(role: str, needed: str) -> bool:
    """Whether a member with `role` may do what needs `needed` (viewer < operator < admin).
    The API's permission class and the dashboard's buttons (dashboard.roles)
    both decide with this and `required_role`."""
    return ROLE_RANK[role] >= ROLE_RANK[needed]


def required_role(view, method: str) -> str:
    if method in SAFE_METHODS:
        return getattr(view, "read_role", Role.VIEWER.value)
    wanted = getattr(view, "write_role", Role.ADMIN.value)
    if isinstance(wanted, dict):
        wanted = wanted.get(method, Role.ADMIN.value)
    if wanted not in ROLE_RANK:
        raise ValueError(f"{type(view).__name__}.write_role {wanted!r} is not a role")
    return wanted


class TenantRolePermission(BasePermission):
    message = "your role in this tenant does not allow this"

    def has_permission(self, request: Request, view) -> bool:
        if getattr(view, "token_scoped", False):
            return not isinstance(request.auth, ApiKey)
        if not (request.user and request.user.is_authenticated):
            return False
        staff = is_platform_staff(request)
        if getattr(view, "platform_staff_only", False):
            return staff
        if staff and getattr(view, "staff_all_tenants", False):
            return True
        # Raises PermissionDenied (403, no data) when the caller belongs to no tenant.
        access = request_access(request)
        return role_allows(access.role, required_role(view, request.method or "GET"))
