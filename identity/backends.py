"""Password login when single sign-on is on (AUTHENTICATION_BACKENDS with OIDC_ISSUER set).

OIDC_LOCAL_LOGIN on (the default): Django's ModelBackend, unchanged. Off: only superusers
may log in with a password (break-glass: the provider is down or misconfigured, and someone
must still reach the admin), through every password door alike, since each one calls
`authenticate()`: the dashboard's form, the Django admin, and the API's token endpoint.
API keys are not passwords and keep working; sessions already open stay open.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.http import HttpRequest


class LocalPasswordBackend(ModelBackend):
    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ):
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None or settings.OIDC_LOCAL_LOGIN or user.is_superuser:
            return user
        return None
