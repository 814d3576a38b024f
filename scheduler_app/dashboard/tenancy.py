"""Which tenant a dashboard session looks at: one of the user's memberships (`?tenant=slug`
switches and is remembered in the session). Not a member of any tenant: 404, nothing shown."""

from __future__ import annotations

from django.http import Http404, HttpRequest

from scheduler_app.models import Tenant, TenantMembership

SESSION_KEY = "dashboard_tenant"


def dashboard_memberships(request: HttpRequest) -> list[TenantMembership]:
    return list(
        TenantMembership.objects.select_related("tenant")
        .filter(user=request.user, tenant__is_active=True)
        .order_by("tenant__slug")
    )


def dashboard_membership(request: HttpRequest) -> TenantMembership:
    memberships = dashboard_memberships(request)
    if not memberships:
        raise Http404(
            "you are not a member of any active tenant "
            "(pending invitations: /dashboard/invitations)"
        )
    wanted = request.GET.get("tenant") or request.session.get(SESSION_KEY)
    chosen = next((m for m in memberships if m.tenant.slug == wanted), memberships[0])
    request.session[SESSION_KEY] = chosen.tenant.slug
    return chosen


def dashboard_tenant(request: HttpRequest) -> Tenant:
    return dashboard_membership(request).tenant
