"""JWT login, refresh and logout.

Login attempts are counted by django-axes (api/login_throttle.py); refresh
tokens rotate and the used one is blacklisted; logout blacklists the refresh token; a token
issued before the user's password last changed is refused (its `hash_password` claim no
longer matches), access and refresh alike.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework_simplejwt.serializers import TokenRefreshSerializer
from rest_framework_simplejwt.settings import api_settings
from rest_framework_simplejwt.tokens import RefreshToken
from rest_framework_simplejwt.utils import get_md5_hash_password
from rest_framework_simplejwt.views import (
    TokenBlacklistView,
    TokenObtainPairView,
    TokenRefreshView,
)

from api.login_throttle import pair_forget
from identity.backends import password_login_allowed


class TokenObtainView(TokenObtainPairView):
    def get_serializer_context(self) -> dict[str, Any]:
        # axes marks the request it is given as locked out, and its middleware (which sees
        # Django's HttpRequest, not DRF's wrapper) turns that mark into the 429.
        return {**super().get_serializer_context(), "request": self.request._request}

    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        response = super().post(request, *args, **kwargs)
        if response.status_code == 200 and isinstance(request.data, dict):
            username = request.data.get("username")
            if isinstance(username, str):
                pair_forget(request=request._request, username=username)
        return response


class RefreshInput(TokenRefreshSerializer):
    def validate(self, attrs: dict[str, Any]) -> dict[str, str]:
        refresh = RefreshToken(attrs["refresh"])  # signature, expiry, blacklist
        user = (
            get_user_model()
            .objects.filter(**{api_settings.USER_ID_FIELD: refresh.get(api_settings.USER_ID_CLAIM)})
            .first()
        )
        claim = refresh.get(api_settings.REVOKE_TOKEN_CLAIM)
        if user is None or claim != get_md5_hash_password(user.password):
            refresh.blacklist()
            raise AuthenticationFailed(
                "this token was issued before the password changed", "token_revoked"
            )
        if not password_login_allowed(user):
            # Single sign-on with OIDC_LOCAL_LOGIN off: a password's tokens end at the next
            # refresh, not JWT_REFRESH_DAYS later (identity/backends.py).
            refresh.blacklist()
            raise AuthenticationFailed(
                "password login is off: sign in with the identity provider", "token_revoked"
            )
        return super().validate(attrs)


class TokenRefreshRotatingView(TokenRefreshView):
    serializer_class = RefreshInput


class LogoutView(TokenBlacklistView):
    """POST {"refresh": "<token>"}: the refresh token can never be used again."""
