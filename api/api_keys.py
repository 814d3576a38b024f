"""`Authorization: Api-Key tsk_...` (or `X-API-Key`) authenticates a machine for one tenant."""

from __future__ import annotations

from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from scheduler_app.services.api_keys import api_key_authenticate


class ApiKeyUser:
    """The request.user of a key: authenticated, never staff, no memberships."""

    is_authenticated = True
    is_anonymous = False
    is_staff = False
    is_superuser = False
    is_active = True
    pk = None
    id = None

    def __init__(self, prefix: str) -> None:
        self.username = f"apikey:{prefix}"

    def get_username(self) -> str:
        return self.username

    def __str__(self) -> str:
        return self.username


class ApiKeyAuthentication(BaseAuthentication):
    keyword = "Api-Key"

    def authenticate(self, request: Request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        raw = ""
        if header.startswith(f"{self.keyword} "):
            raw = header[len(self.keyword) + 1 :].strip()
        elif request.META.get("HTTP_X_API_KEY"):
            raw = request.META["HTTP_X_API_KEY"].strip()
        if not raw:
            return None
        key = api_key_authenticate(raw_key=raw)
        if key is None:
            raise AuthenticationFailed("invalid or revoked API key")
        return ApiKeyUser(key.prefix), key

    def authenticate_header(self, request: Request) -> str:
        return self.keyword
