"""The tenant's members and invitations, for its admins (the API's rules for /members): who
is a member with which role, the invitations and their state, a form that issues one (its
link shown once, or mailed), and a button that revokes one. No account is named or created
here: the invitee chooses theirs when accepting (dashboard/join.py)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from api import views_access, views_invitations
from dashboard.roles import ApiRule, follows_api
from dashboard.tenancy import dashboard_membership
from dashboard.views import page_context
from scheduler_app import selectors
from scheduler_app.choices import Role
from scheduler_app.errors import DomainError, NotFound
from scheduler_app.services import invitations

LIST = ApiRule(views_access.MemberListView, "GET")
INVITE = ApiRule(views_access.MemberListView, "POST")
REVOKE = ApiRule(views_invitations.TenantInvitationDetailView, "DELETE")


def _page(request: HttpRequest, extra: dict, status: int = 200) -> HttpResponse:
    tenant = dashboard_membership(request).tenant
    context = page_context(request)
    context.update(
        members=selectors.member_list(tenant=tenant),
        invitations=selectors.invitation_list(tenant=tenant)[:100],
        roles=Role.values,
        **extra,
    )
    return render(request, "dashboard/members.html", context, status=status)


@login_required
@follows_api(GET=LIST, HEAD=LIST, POST=INVITE)
def member_list(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _page(request, {})
    email = request.POST.get("email", "").strip()
    try:
        issued = invitations.invitation_create(
            tenant=dashboard_membership(request).tenant,
            role=request.POST.get("role", ""),
            email=email,
            invited_by=f"user:{request.user.get_username()}",
            link_for=invitations.emailed_link
            if email
            else lambda t: request.build_absolute_uri(invitations.join_path(t)),
        )
    except DomainError as refused:
        return _page(request, {"problem": refused, "typed_email": email}, refused.status_code)
    # Rendered, not redirected: the link is shown this once and stored nowhere.
    return _page(request, {"issued": issued}, 201)


@login_required
@follows_api(POST=REVOKE)
def invitation_revoke(request: HttpRequest, invitation_id: str) -> HttpResponse:
    try:
        invitations.invitation_revoke(
            tenant=dashboard_membership(request).tenant,
            invitation_id=invitation_id,
            actor=f"user:{request.user.get_username()}",
        )
    except NotFound as error:
        raise Http404(str(error)) from error
    except DomainError as refused:
        messages.error(request, refused.message)
    else:
        messages.success(request, "Invitation revoked: its link no longer works.")
    return redirect("dashboard:members")
