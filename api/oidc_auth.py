"""`Authorization: Bearer <access token of the identity provider>` (single sign-on).

Next to the API's own JWTs (simplejwt) and API keys: a bearer token whose unverified `iss`
is OIDC_ISSUER is this class's to judge, fully (identity/tokens.py: the provider's JWKS,
issuer, audience, expiry, asymmetric algorithms only), and any failure is a 401; every
other bearer token is left to simplejwt, which refuses what it did not sign (another
issuer's token is a 401 there). Without OIDC_ISSUER this class answers nothing.

The tenant and role come from the token's groups through OIDC_GROUP_ROLES, the mapping
the dashboard's login applies (api/tenancy.py), read from the token on every call: no
membership is written by an API call, and a group taken away at the provider stops
counting when the tokens that name it expire.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from identity.selectors import provider_grants
from identity.services import ProviderLoginRefused, provider_user_ensure
from identity.tokens import (
    ProviderTokenInvalid,
    ProviderUnavailable,
    provider_token_verify,
    token_issuer_unverified,
)
from scheduler_app.models import Tenant


@dataclass(frozen=True)
class ProviderToken:
    """request.auth of a provider's access token: its claims and what they grant."""

    claims: dict[str, Any]
    grants: tuple[tuple[Tenant, str], ...]


class ProviderTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request):
        if not settings.OIDC_ISSUER:
            return None
        scheme, _, raw = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        raw = raw.strip()
        if scheme.lower() != "bearer" or not raw:
            return None
        if token_issuer_unverified(raw) != settings.OIDC_ISSUER:
            return None
        try:
            claims = provider_token_verify(raw, audiences=settings.OIDC_API_AUDIENCES)
        except ProviderTokenInvalid as error:
            raise AuthenticationFailed(f"identity provider token refused: {error}") from error
        except ProviderUnavailable as error:
            raise AuthenticationFailed(
                "the identity provider's keys cannot be read to check this token"
            ) from error
        try:
            user = provider_user_ensure(claims=claims)
        except ProviderLoginRefused as refusal:  # an empty `sub`: no one to be
            raise AuthenticationFailed(str(refusal)) from refusal
        if not user.is_active:
            raise AuthenticationFailed("this account is deactivated")
        return user, ProviderToken(claims=claims, grants=tuple(provider_grants(claims=claims)))

    def authenticate_header(self, request: Request) -> str:
        # The first class's header decides 401 (with it) over 403: the same as simplejwt's.
        return 'Bearer realm="api"'
