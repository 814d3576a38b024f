"""Joining a tenant by invitation: the page a token's link opens. Public, since the invitee
may have no account yet: signed out, they choose a user name and password (a new account);
signed in, they accept with their own account. scheduler_app/services/invitations.py says
why an invitation names no account.

The link is /dashboard/join/<token>; that page moves the token into the session and
redirects to /dashboard/join, so the token leaves the address bar, the history and the
Referer of every later request (Django's password reset does the same). Signing in from the
page keeps the session, and the token with it.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_safe

from scheduler_app.errors import DomainError
from scheduler_app.services import invitations

SESSION_KEY = "invitation_token"


class NewAccountForm(forms.Form):
    username = forms.CharField(max_length=150, label="User name")
    password = forms.CharField(
        max_length=128, strip=False, widget=forms.PasswordInput, label="Password"
    )
    password_again = forms.CharField(
        max_length=128, strip=False, widget=forms.PasswordInput, label="Password, again"
    )

    def clean(self):
        data = super().clean()
        if data.get("password") != data.get("password_again"):
            self.add_error("password_again", "the two passwords differ")
        return data


@require_safe
def join_with_token(request: HttpRequest, token: str) -> HttpResponse:
    request.session[SESSION_KEY] = token
    return redirect("dashboard:join")


def _page(request: HttpRequest, context: dict, status: int = 200) -> HttpResponse:
    return render(request, "dashboard/join.html", context, status=status)


@require_http_methods(["GET", "HEAD", "POST"])
def join(request: HttpRequest) -> HttpResponse:
    token = request.session.get(SESSION_KEY)
    if not token:
        return _page(request, {"problem": "Open the invitation link you were sent."}, 404)
    try:
        invitation = invitations.invitation_for_token(token=token)
    except DomainError as refused:  # unknown, used, revoked, expired
        return _page(request, {"problem": refused.message}, refused.status_code)
    signed_in = request.user.is_authenticated
    form = NewAccountForm(request.POST if request.method == "POST" and not signed_in else None)
    context = {"invitation": invitation, "form": form, "signed_in": signed_in}
    if request.method != "POST":
        return _page(request, context)
    if not signed_in and not form.is_valid():
        return _page(request, context, 400)
    try:
        if signed_in:
            membership = invitations.invitation_accept_signed_in(token=token, user=request.user)
        else:
            membership = invitations.invitation_accept_new_account(
                token=token,
                username=form.cleaned_data["username"],
                password=form.cleaned_data["password"],
            )
    except DomainError as refused:
        if signed_in or refused.field not in form.fields:
            return _page(request, {**context, "problem": refused.message}, refused.status_code)
        form.add_error(refused.field, refused.message)
        return _page(request, context, 400)
    request.session.pop(SESSION_KEY, None)
    if not signed_in:
        # The account a new member gets is checked by the password validators; the password
        # backend is the one that signs them in (the login throttle's backend asks for a
        # request's password): Django's, or single sign-on's (project/settings/oidc.py).
        login(request, membership.user, backend=settings.PASSWORD_LOGIN_BACKEND)
    messages.success(request, f"You joined {membership.tenant.slug} as {membership.role}.")
    return redirect(f"{reverse('dashboard:overview')}?tenant={membership.tenant.slug}")
