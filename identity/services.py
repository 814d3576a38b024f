"""Writes for single sign-on: the local account of a provider's user, and its memberships.

Users are created on their first login. At every dashboard login the memberships in the
tenants the mapping names (OIDC_GROUP_ROLES) are set from the groups the provider sends, the
whole truth for those tenants: a role the groups no longer give is taken away, a user whose
groups map to nothing is refused (and loses those memberships). Memberships in tenants the
mapping does not name (an invitation accepted) are left as they are.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from identity.grants import mapped_tenants
from identity.models import ProviderIdentity
from identity.selectors import provider_grants
from scheduler_app.models import Tenant, TenantMembership
from scheduler_app.services.tenants import membership_set

_USERNAME_UNSAFE = re.compile(r"[^\w.@+-]")


class ProviderLoginRefused(Exception):
    """The provider vouched for the user, and this installation still says no; the message
    is shown to them."""


@dataclass(frozen=True)
class ProviderLogin:
    user: Any
    grants: tuple[tuple[Tenant, str], ...]


def _subject(claims: Mapping[str, Any]) -> str:
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise ProviderLoginRefused("the provider's token names no subject (sub)")
    return subject


def _username_for(claims: Mapping[str, Any], subject: str) -> str:
    """A readable, unused user name: the provider's preferred name (or the e-mail's local
    part, or the subject), with a short hash of the identity appended when a local account
    already has that name. The name identifies nobody: logins find the account by
    (issuer, subject)."""
    email = claims.get("email") if isinstance(claims.get("email"), str) else ""
    wanted = claims.get("preferred_username")
    if not isinstance(wanted, str) or not wanted:
        wanted = email.partition("@")[0] or subject
    base = _USERNAME_UNSAFE.sub("-", wanted)[:120] or "sso-user"
    digest = hashlib.sha256(f"{settings.OIDC_ISSUER}|{subject}".encode()).hexdigest()
    users = get_user_model().objects
    for candidate in (base, f"{base}-{digest[:8]}", f"sso-{digest[:32]}"):
        if not users.filter(username=candidate).exists():
            return candidate
    raise ProviderLoginRefused("no free user name for this identity")


def provider_user_ensure(*, claims: Mapping[str, Any]):
    """The local account linked to the token's (issuer, subject), created on first use."""
    subject = _subject(claims)
    identity = (
        ProviderIdentity.objects.select_related("user")
        .filter(issuer=settings.OIDC_ISSUER, subject=subject)
        .first()
    )
    if identity is not None:
        return identity.user
    email = claims.get("email") if isinstance(claims.get("email"), str) else ""
    try:
        with transaction.atomic():
            user = get_user_model().objects.create_user(
                username=_username_for(claims, subject), email=email[:254]
            )
            user.set_unusable_password()
            user.save(update_fields=["password"])
            ProviderIdentity.objects.create(user=user, issuer=settings.OIDC_ISSUER, subject=subject)
    except IntegrityError:
        # Two first logins at once: the other one linked the identity.
        return (
            ProviderIdentity.objects.select_related("user")
            .get(issuer=settings.OIDC_ISSUER, subject=subject)
            .user
        )
    return user


def _memberships_sync(*, user, grants: list[tuple[Tenant, str]]) -> None:
    granted = {tenant.slug for tenant, _ in grants}
    TenantMembership.objects.filter(
        user=user, tenant__slug__in=mapped_tenants(settings.OIDC_GROUP_ROLES) - granted
    ).delete()
    for tenant, role in grants:
        membership_set(tenant=tenant, user=user, role=role)


def provider_login_sync(*, claims: Mapping[str, Any]) -> ProviderLogin:
    """A dashboard login: the account (created on first login) and its memberships set
    from the groups; ProviderLoginRefused when the groups map to no tenant (raised after
    the memberships they no longer give are gone, so the refusal takes them away too)."""
    outcome = _login_sync(claims=claims)
    if isinstance(outcome, str):
        raise ProviderLoginRefused(outcome)
    return outcome


@transaction.atomic
def _login_sync(*, claims: Mapping[str, Any]) -> ProviderLogin | str:
    subject = _subject(claims)
    grants = provider_grants(claims=claims)
    if not grants:
        identity = (
            ProviderIdentity.objects.select_related("user")
            .filter(issuer=settings.OIDC_ISSUER, subject=subject)
            .first()
        )
        if identity is not None:
            _memberships_sync(user=identity.user, grants=[])
        return (
            "your account at the identity provider is in no group that this installation "
            "maps to a tenant; ask an administrator to add you to one"
        )
    user = provider_user_ensure(claims=claims)
    if not user.is_active:
        return "this account is deactivated here"
    _memberships_sync(user=user, grants=grants)
    ProviderIdentity.objects.filter(user=user).update(last_login_at=timezone.now())
    return ProviderLogin(user=user, grants=tuple(grants))
