"""The signed-in user's pending invitations: accept or decline (no membership needed)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST, require_safe

from scheduler_app import selectors
from scheduler_app.errors import DomainError, NotFound
from scheduler_app.services import members


@login_required
@require_safe
def invitation_list(request: HttpRequest) -> HttpResponse:
    invitations = selectors.invitation_list_for_user(user=request.user)
    return render(request, "dashboard/invitations.html", {"invitations": invitations})


@login_required
@require_POST
def invitation_action(request: HttpRequest, invitation_id: str, action: str) -> HttpResponse:
    try:
        if action == "accept":
            membership = members.invitation_accept(user=request.user, invitation_id=invitation_id)
            messages.success(request, f"You joined {membership.tenant.slug} as {membership.role}.")
            return redirect(f"/dashboard/?tenant={membership.tenant.slug}")
        if action == "decline":
            members.invitation_decline(user=request.user, invitation_id=invitation_id)
            messages.info(request, "Invitation declined.")
            return redirect("dashboard:invitations")
    except NotFound as error:
        raise Http404(str(error)) from error
    except DomainError as error:
        messages.error(request, error.message)
        return redirect("dashboard:invitations")
    raise Http404("no such action")
