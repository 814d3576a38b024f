"""Login throttling for the token endpoint, the dashboard login and the admin login.

django-axes counts failed `authenticate()` calls per username and per client address (either
one reaching the limit locks, so neither spraying one password over many usernames from one
address nor many addresses against one username gets through) and refuses further attempts,
the right password included, until the cool-off has passed with no new attempt. This module
adapts it to this project: which address is the client's, what a lockout looks like (429 with
Retry-After; JSON for the API, a page for the browser), and the audit entry it leaves.
"""

from __future__ import annotations

import logging
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.helpers import get_cool_off
from axes.signals import user_locked_out
from django.conf import settings
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

from scheduler_app.services.audit import audit_record

logger = logging.getLogger(__name__)


class LoginThrottleBackend(AxesStandaloneBackend):
    """axes' lockout check, for logins that come with a request.

    Every HTTP login passes its request to `authenticate()` (Django's login form, the admin,
    simplejwt's token serializer); a call without one (a shell, the test client's `login()`)
    has no client address to count, so it is left to the next backend instead of refused.
    """

    def authenticate(self, request: HttpRequest | None, *args: Any, **kwargs: Any) -> None:
        if request is None:
            return None
        return super().authenticate(request, *args, **kwargs)


def client_ip(request: HttpRequest) -> str | None:
    """The client's address: REMOTE_ADDR, or behind LOGIN_TRUSTED_PROXIES proxies the address
    the outermost trusted proxy saw (a client can write any X-Forwarded-For it likes, so only
    entries appended by our own proxies count)."""
    proxies = int(getattr(settings, "LOGIN_TRUSTED_PROXIES", 0))
    forwarded = [
        part.strip()
        for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
        if part.strip()
    ]
    if proxies > 0 and len(forwarded) >= proxies:
        return forwarded[-proxies]
    return request.META.get("REMOTE_ADDR") or None


def retry_after_seconds(request: HttpRequest) -> int:
    # Every attempt during a lockout restarts the cool-off (axes'
    # AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT), so the whole cool-off is the wait.
    cool_off = get_cool_off(request)
    return max(1, int(cool_off.total_seconds())) if cool_off else 3600


def lockout_response(
    request: HttpRequest,
    original_response: HttpResponse | None = None,
    credentials: dict | None = None,
) -> HttpResponse:
    retry_after = retry_after_seconds(request)
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse(
            {
                "code": "login_locked",
                "message": "too many failed logins for this user name or address; "
                f"try again in {retry_after} s",
            },
            status=429,
        )
    else:
        response = HttpResponse(
            render_to_string("dashboard/lockout.html", {"retry_after": retry_after}, request),
            status=429,
        )
    response["Retry-After"] = str(retry_after)
    return response


@receiver(user_locked_out)
def _audit_lockout(sender, request: HttpRequest, username: str, ip_address: str, **kwargs) -> None:
    """A refused login lands in the audit log (platform-wide: no tenant is known yet)."""
    try:
        audit_record(
            tenant=None,
            actor=f"user:{username}" if username else "anonymous",
            action="auth.lockout",
            object_type="login",
            object_id=(request.path or "")[:64],
            status_code=429,
            detail={"ip_address": ip_address, "path": request.path},
        )
    except Exception:  # the refusal stands even if the audit write fails
        logger.exception("could not audit the login lockout of %r", username)
