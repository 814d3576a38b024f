"""Which tenant a dashboard session looks at: one of the user's memberships (`?tenant=slug`
switches; remembered in the session and, across sign-ins, in a signed cookie naming the user).
Not a member of any tenant: 404, nothing shown.

A link to a page of another of the user's tenants (a task, run or DAG id) says so and offers
the switch; an id of a tenant the user does not belong to stays a bare 404."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from dags import selectors as dag_selectors
from scheduler_app import selectors
from scheduler_app.models import Tenant, TenantMembership

SESSION_KEY = "dashboard_tenant"
COOKIE = "dashboard_tenant"
COOKIE_SALT = "dashboard.tenant"
COOKIE_MAX_AGE = 180 * 86400


class InAnotherTenant(Exception):
    """The object asked for belongs to another tenant the user is a member of."""

    def __init__(self, membership: TenantMembership) -> None:
        super().__init__(membership.tenant.slug)
        self.membership = membership


def dashboard_memberships(request: HttpRequest) -> list[TenantMembership]:
    return list(
        # A user's memberships in every tenant: the user is the scope here.
        TenantMembership.platform.select_related("tenant")
        .filter(user=request.user, tenant__is_active=True)
        .order_by("tenant__slug")
    )


def dashboard_membership(request: HttpRequest) -> TenantMembership:
    memberships = dashboard_memberships(request)
    if not memberships:
        raise Http404(
            "you are not a member of any active tenant (to join one, open the invitation "
            "link a tenant admin gave you)"
        )
    wanted = request.GET.get("tenant") or request.session.get(SESSION_KEY) or _remembered(request)
    chosen = next((m for m in memberships if m.tenant.slug == wanted), memberships[0])
    request.session[SESSION_KEY] = chosen.tenant.slug
    return chosen


def dashboard_tenant(request: HttpRequest) -> Tenant:
    return dashboard_membership(request).tenant


def _remembered(request: HttpRequest) -> str | None:
    """The tenant this user last looked at in this browser (a fresh sign-in starts there)."""
    value = request.get_signed_cookie(COOKIE, default=None, salt=COOKIE_SALT)
    if not value or ":" not in value:
        return None
    user_id, slug = value.split(":", 1)
    return slug if user_id == str(request.user.pk) else None


def remember_tenant(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    slug = request.session.get(SESSION_KEY)
    # Written when it changes, not on every poll of every page.
    if slug and request.user.is_authenticated and _remembered(request) != slug:
        response.set_signed_cookie(
            COOKIE,
            f"{request.user.pk}:{slug}",
            salt=COOKIE_SALT,
            max_age=COOKIE_MAX_AGE,
            httponly=True,
            samesite="Lax",
            secure=request.is_secure(),
        )
    return response


def raise_if_elsewhere(request: HttpRequest, *, kind: str, object_id: str) -> None:
    """Raise InAnotherTenant when `object_id` is in another of the user's tenants."""

    memberships = {m.tenant_id: m for m in dashboard_memberships(request)}
    owner_among = dag_selectors.dag_owner_among if kind.startswith("dag") else selectors.owner_among
    owner = owner_among(kind=kind, object_id=object_id, tenant_ids=list(memberships))
    if owner is not None:
        raise InAnotherTenant(memberships[owner])


def shows_other_tenant(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A detail page whose object is in another of the user's tenants: a 404 that names that
    tenant and links to the same page in it, instead of a bare 404."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except InAnotherTenant as elsewhere:
            current = dashboard_membership(request)
            return render(
                request,
                "dashboard/elsewhere.html",
                {
                    "tenant": current.tenant,
                    "role": current.role,
                    "memberships": dashboard_memberships(request),
                    "owner": elsewhere.membership.tenant,
                    "switch_url": f"{request.path}?tenant={elsewhere.membership.tenant.slug}",
                    "poll_seconds": 0,
                },
                status=404,
            )

    return wrapped
