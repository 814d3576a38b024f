"""Password login when single sign-on is on (AUTHENTICATION_BACKENDS with OIDC_ISSUER set).

OIDC_LOCAL_LOGIN on (the default): Django's ModelBackend, unchanged. Off: only superusers
may log in with a password (break-glass: the provider is down or misconfigured, and someone
must still reach the admin), through every password door alike, since each one calls
`authenticate()`: the dashboard's form, the Django admin, and the API's token endpoint.
API keys are not passwords and keep working; sessions already open stay open; the API's
refresh tokens that a password got stop at their next refresh (api/views_auth.py).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.http import HttpRequest


def password_login_allowed(user) -> bool:
    """Whether `user` may sign in with a password here (and refresh what a password got)."""
    return not settings.OIDC_ENABLED or settings.OIDC_LOCAL_LOGIN or bool(user.is_superuser)


class LocalPasswordBackend(ModelBackend):
    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ):
        user = super().authenticate(request, username=username, password=password, **kwargs)
        return user if user is not None and password_login_allowed(user) else None
