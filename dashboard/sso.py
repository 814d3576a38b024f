"""The dashboard's "Log in with <provider>" (single sign-on, docs/operations/sso.md).

mozilla-django-oidc runs the authorization code flow (state, nonce, PKCE, the code for
tokens); this module adapts it to the installation: the provider's endpoints come from its
discovery document (identity/tokens.py) instead of four settings, the ID token is checked
by the same function as the API's bearer tokens (issuer and audience included, which the
library leaves out), and the account and its memberships are the identity app's
(identity/services.py). A login the installation refuses (no mapped group) gets a page that
says why, with no session.
"""

from __future__ import annotations

import logging
from typing import Any

import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.views import LoginView
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.generic import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from identity.services import ProviderLoginRefused, provider_login_sync
from identity.tokens import (
    PROVIDER,
    ProviderTokenInvalid,
    ProviderUnavailable,
    provider_token_verify,
)

logger = logging.getLogger(__name__)
REFUSAL_ATTRIBUTE = "sso_refusal"


class ProviderLoginBackend(OIDCAuthenticationBackend):
    """Listed in AUTHENTICATION_BACKENDS only with OIDC_ISSUER set; answers only the
    callback's `authenticate(request, nonce=..., code_verifier=...)` (a password login's
    request has no `code`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Not the library's __init__: it reads four endpoint settings that discovery gives.
        self.UserModel = get_user_model()
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET

    # The library's attribute names, read when a login needs them.
    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:
        return PROVIDER.endpoint("token_endpoint")

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str:
        return PROVIDER.endpoint("userinfo_endpoint")

    def authenticate(self, request: HttpRequest | None, **kwargs: Any):
        if request is None or "code" not in request.GET:
            return None
        try:
            return super().authenticate(request, **kwargs)
        except (ProviderTokenInvalid, ProviderUnavailable, requests.RequestException) as error:
            logger.warning("single sign-on failed: %s", error)
            setattr(
                request, REFUSAL_ATTRIBUTE, f"the identity provider's answer was refused: {error}"
            )
            return None

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        claims = provider_token_verify(token, audiences=[settings.OIDC_RP_CLIENT_ID])
        if claims.get("nonce") != kwargs.get("nonce"):
            raise ProviderTokenInvalid("the ID token's nonce is not this login's")
        return claims

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]):
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if userinfo.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("userinfo names another subject than the ID token")
        try:
            # The signed ID token's claims win over userinfo's; userinfo adds what the ID
            # token leaves out (some providers send groups only there).
            return provider_login_sync(claims={**userinfo, **payload}).user
        except ProviderLoginRefused as refusal:
            setattr(self.request, REFUSAL_ATTRIBUTE, str(refusal))
            return None

    def get_user(self, user_id: Any):
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None


def _provider_context() -> dict[str, Any]:
    return {
        "sso_enabled": settings.OIDC_ENABLED,
        "sso_name": settings.OIDC_PROVIDER_NAME,
        "local_login": settings.OIDC_LOCAL_LOGIN or not settings.OIDC_ENABLED,
    }


class DashboardLoginView(LoginView):
    template_name = "dashboard/login.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), **_provider_context()}


def _refused(request: HttpRequest, reason: str, *, status: int) -> HttpResponse:
    return render(
        request,
        "dashboard/sso_refused.html",
        {"reason": reason, **_provider_context()},
        status=status,
    )


class ProviderLoginStartView(OIDCAuthenticationRequestView):
    """GET: off to the provider's authorization endpoint (state, nonce, PKCE in the session)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        View.__init__(self, *args, **kwargs)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.OIDC_ENABLED:
            raise Http404
        try:
            self.OIDC_OP_AUTH_ENDPOINT = PROVIDER.endpoint("authorization_endpoint")
        except ProviderUnavailable as error:
            logger.warning("single sign-on unavailable: %s", error)
            return _refused(request, "the identity provider cannot be reached", status=503)
        return super().get(request)


class ProviderLoginCallbackView(OIDCAuthenticationCallbackView):
    """GET from the provider with the code: tokens, checks, account, memberships, session."""

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.OIDC_ENABLED:
            raise Http404
        return super().get(request)

    def login_failure(self) -> HttpResponse:
        reason = getattr(self.request, REFUSAL_ATTRIBUTE, None) or (
            "the identity provider did not sign you in"
        )
        return _refused(self.request, reason, status=403)
