"""Login throttling for the token endpoint, the dashboard login and the admin login.

django-axes counts failed `authenticate()` calls per (user name, client address) pair, and
only per pair: a pair that fails LOGIN_FAILURE_LIMIT times in a row is refused, the right
password included, for LOGIN_LOCKOUT_SECONDS; each further lockout of the same pair lasts
twice as long as the one before (up to LOGIN_LOCKOUT_MAX_SECONDS); a successful login, or
that long without a failure, forgets the pair. One user's wrong passwords therefore never
lock another user out, even from the same address (behind an ingress without
LOGIN_TRUSTED_PROXIES every client shares one), and nobody can lock a user out from
everywhere by failing with their name. axes read the former settings, ["username",
"ip_address"], as "either one": one address's failures for one user locked every user of
that address for 900 s.

This module adapts axes to this project: the pair's backoff (PairLockoutHandler, over the
pure `lockout_state`), which address is the client's, what a lockout looks like (429 with
Retry-After; JSON for the API, a page for the browser), and the audit entry it leaves.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username, get_credentials, get_failure_limit
from axes.models import AccessAttempt
from axes.signals import user_locked_out
from django.conf import settings
from django.db.models import Max, QuerySet, Sum
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.utils import timezone

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


# --- the pair's backoff ------------------------------------------------------------------
@dataclass(frozen=True)
class LockoutState:
    locked: bool
    level: int  # lockouts the pair has reached (0: none)
    retry_after: timedelta  # zero unless locked


def lockout_cool_off(level: int, *, base: timedelta, cap: timedelta) -> timedelta:
    """The n-th lockout of a pair lasts base * 2**(n-1), at most `cap`."""
    if level <= 0:
        return timedelta(0)
    seconds = base.total_seconds() * 2.0 ** min(level - 1, 64)  # a float: no overflow
    return timedelta(seconds=min(seconds, cap.total_seconds()))


def lockout_state(
    *,
    failures: int,
    last_failure: datetime | None,
    now: datetime,
    limit: int,
    base: timedelta,
    cap: timedelta,
) -> LockoutState:
    """Pure: a pair with `failures` in a row (none while it was locked: those are refused
    before they are counted), the last at `last_failure`, is locked when its count has just
    reached a multiple of `limit` and that lockout's cool-off has not passed."""
    level = failures // limit if limit > 0 else 0
    if level == 0 or failures % limit != 0 or last_failure is None:
        return LockoutState(locked=False, level=level, retry_after=timedelta(0))
    ends = last_failure + lockout_cool_off(level, base=base, cap=cap)
    if now >= ends:
        return LockoutState(locked=False, level=level, retry_after=timedelta(0))
    return LockoutState(locked=True, level=level, retry_after=ends - now)


def _settings_cool_off() -> tuple[timedelta, timedelta]:
    base = settings.AXES_COOLOFF_TIME
    return base, max(base, timedelta(seconds=settings.LOGIN_LOCKOUT_MAX_SECONDS))


class PairLockoutHandler(AxesDatabaseHandler):
    """axes' database handler, deciding by the pair's history instead of one fixed
    cool-off. axes' own cool-off is one duration for every pair (a callable
    AXES_COOLOFF_TIME sees the request, not the pair's past lockouts), and its clean-up
    deletes every pair's attempts older than the cool-off of whichever request runs it:
    a pair's record is kept here until LOGIN_LOCKOUT_MAX_SECONDS pass without a failure."""

    def _pair_attempts(self, request, credentials: dict | None) -> QuerySet:
        [attempts] = self.filter_user_attempts(request, credentials)  # one pair: one query
        return attempts

    def _pair(self, request, credentials: dict | None) -> tuple[int, LockoutState]:
        totals = self._pair_attempts(request, credentials).aggregate(
            failures=Sum("failures_since_start"), last=Max("attempt_time")
        )
        base, cap = _settings_cool_off()
        failures = totals["failures"] or 0
        state = lockout_state(
            failures=failures,
            last_failure=totals["last"],
            now=request.axes_attempt_time or timezone.now(),
            limit=get_failure_limit(request, credentials),
            base=base,
            cap=cap,
        )
        return failures, state

    def pair_state(self, request, credentials: dict | None = None) -> LockoutState:
        return self._pair(request, credentials)[1]

    def get_failures(self, request, credentials: dict | None = None) -> int:
        """What axes compares with the limit: the limit itself while the pair is locked,
        else the failures counted towards its next lockout."""
        limit = get_failure_limit(request, credentials)
        failures, state = self._pair(request, credentials)
        if state.locked:
            return limit
        return failures % limit if limit > 0 else 0

    def get_user_attempts(self, request, credentials: dict | None = None) -> list[QuerySet]:
        return [self._pair_attempts(request, credentials)]

    def user_login_failed(self, sender, credentials: dict, request=None, **kwargs) -> None:
        # A login without a user name is single sign-on's callback (dashboard/sso.py): the
        # identity provider throttles its passwords, and this installation's refusals (no
        # mapped group) are no guesses. Counted, they would be one pair per address, and a few
        # refused people behind one office address would lock everyone there out of it.
        if not get_client_username(request, credentials):
            return
        super().user_login_failed(sender, credentials, request, **kwargs)

    def clean_expired_user_attempts(self, request=None, credentials=None) -> int:
        _, cap = _settings_cool_off()
        count, _ = AccessAttempt.objects.filter(attempt_time__lte=timezone.now() - cap).delete()
        return count


def pair_forget(*, request: HttpRequest, username: str) -> None:
    """A successful sign-in forgets its pair (its user name from its address only). Django's
    login() does it through axes (AXES_RESET_ON_SUCCESS); a JWT is obtained without login(),
    so the token endpoint calls this."""
    address = getattr(request, "axes_ip_address", None) or client_ip(request)
    if username and address:
        AccessAttempt.objects.filter(username=username, ip_address=address).delete()


def _handler() -> PairLockoutHandler:
    return PairLockoutHandler()


def retry_after_seconds(request: HttpRequest, credentials: dict | None = None) -> int:
    """How long this pair is still locked (attempts during a lockout are refused before they
    are counted, so they do not extend it)."""
    if credentials is None:
        credentials = get_credentials(get_client_username(request, credentials))
    remaining = _handler().pair_state(request, credentials).retry_after
    return max(1, int(remaining.total_seconds() + 0.999))


# --- which address is the client's -------------------------------------------------------------
def client_ip(request: HttpRequest) -> str | None:
    """The client's address: REMOTE_ADDR, or behind LOGIN_TRUSTED_PROXIES proxies the address
    the outermost trusted proxy saw. Each proxy appends the address it got the request from,
    so with N trusted proxies that is the N-th entry from the end of X-Forwarded-For: a
    client can write any entries it likes, but only before those. Anything that is not an
    address there (or too few entries: a request that bypassed the proxies) counts as the
    peer itself."""
    peer = request.META.get("REMOTE_ADDR") or None
    proxies = int(getattr(settings, "LOGIN_TRUSTED_PROXIES", 0))
    if proxies <= 0:
        return peer
    forwarded = [
        part.strip()
        for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
        if part.strip()
    ]
    if len(forwarded) < proxies:
        return peer
    try:
        return str(ipaddress.ip_address(forwarded[-proxies]))
    except ValueError:
        return peer


def lockout_response(
    request: HttpRequest,
    original_response: HttpResponse | None = None,
    credentials: dict | None = None,
) -> HttpResponse:
    retry_after = retry_after_seconds(request, credentials)
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse(
            {
                "code": "login_locked",
                "message": "too many failed logins for this user name from this address; "
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
    """A lockout lands in the audit log (platform-wide: no tenant is known yet), once, when
    it starts: the attempts refused during it are not counted, and an anonymous attacker's
    every try must not be a row."""
    if getattr(request, "axes_failures_since_start", None) is None:
        return  # refused during a lockout: nothing was counted
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
