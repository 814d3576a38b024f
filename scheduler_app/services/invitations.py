"""Member invitations: single-use tokens a tenant admin hands out; the invitee accepts.

A tenant admin never creates, names or touches a platform account. An invitation offers a
role in the admin's tenant to whoever holds its token: they accept it with a new account
whose user name and password they choose, or signed in with their own account. The review's
takeover went through the old design, where an invitation named a user name and bound itself
to whatever account had it: another tenant's admin created `alice.demo` with his own password
before demo's admin invited her, and accepted in her place.

The token (`inv_<prefix>_<secret>`, 256 random bits) is returned once, by `invitation_create`,
and mailed when an address is given; only its SHA-256 is stored, compared in constant time.
It works once, until it expires (MEMBER_INVITATION_TTL_HOURS) or an admin revokes it.
"""

from __future__ import annotations

import hashlib
import logging
import secrets as token_source
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from scheduler_app import selectors
from scheduler_app.choices import Role
from scheduler_app.errors import Conflict, DeliveryFailed, Gone, NotFound, ValidationFailed
from scheduler_app.models import MemberInvitation, Tenant, TenantMembership
from scheduler_app.services.audit import audit_record
from scheduler_app.services.tenants import membership_set

logger = logging.getLogger(__name__)

TOKEN_PREFIX = "inv_"  # noqa: S105 (what every token starts with, not a secret)
PREFIX_HEX_CHARS = 12
MAX_TOKEN_LENGTH = 200


def join_path(token: str) -> str:
    """The dashboard's join page for an invitation's token (the page is the dashboard's; the
    link is part of the invitation)."""
    return reverse("dashboard:join-token", args=[token])


def emailed_link(token: str) -> str:
    """The link a mail carries: the installation's configured address (DASHBOARD_BASE_URL),
    never the Host header of the request that asked for the mail."""
    return settings.ALERTS["BASE_URL"].rstrip("/") + join_path(token)


@dataclass(frozen=True)
class IssuedInvitation:
    invitation: MemberInvitation
    # The token and its link, for the admin to hand over; None when it went by email (then
    # only the mailbox's owner has it).
    token: str | None
    link: str | None


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _now(now: datetime | None) -> datetime:
    return now or timezone.now()


@transaction.atomic
def invitation_create(
    *,
    tenant: Tenant,
    role: str,
    email: str = "",
    invited_by: str = "",
    link_for: Callable[[str], str],
    now: datetime | None = None,
) -> IssuedInvitation:
    """A new invitation to `tenant` as `role`. With `email`, the link goes there (and is not
    returned); without, it is returned for the admin to hand over. `link_for(token)` is the
    accept page's address. A mail that cannot be sent leaves no invitation behind."""
    if role not in Role.values:
        raise ValidationFailed(f"role must be one of {', '.join(Role.values)}", field="role")
    email = email.strip()
    if email:
        try:
            validate_email(email)
        except DjangoValidationError as error:
            raise ValidationFailed("email must be an email address", field="email") from error
    created_at = _now(now)
    prefix = token_source.token_hex(PREFIX_HEX_CHARS // 2)
    token = f"{TOKEN_PREFIX}{prefix}_{token_source.token_urlsafe(32)}"
    invitation = MemberInvitation.objects.create(
        tenant=tenant,
        role=role,
        email=email,
        token_prefix=prefix,
        token_hash=_digest(token),
        invited_by=invited_by[:255],
        expires_at=created_at + timedelta(hours=settings.MEMBER_INVITATION_TTL_HOURS),
    )
    audit_record(
        tenant=tenant,
        actor=invited_by or "system",
        action="invitation.create",
        object_type="invitation",
        object_id=str(invitation.id),
        detail={"role": role, "emailed": bool(email)},
    )
    link = link_for(token)
    if not email:
        return IssuedInvitation(invitation=invitation, token=token, link=link)
    try:
        send_mail(
            subject=f"You are invited to {tenant.slug} on the scheduler",
            message=(
                f"{invited_by or 'An admin'} invites you to the tenant {tenant.slug} as {role}.\n\n"
                f"Accept (once, before {invitation.expires_at:%Y-%m-%d %H:%M} UTC), with a new "
                f"account or your own:\n{link}\n\n"
                "If you did not expect this, ignore it: nothing happens unless you accept."
            ),
            from_email=settings.ALERTS["FROM_EMAIL"],
            recipient_list=[email],
        )
    except Exception as error:  # SMTP down, refused: the whole invitation is undone
        logger.warning("could not mail invitation %s: %s", invitation.id, error)
        raise DeliveryFailed(
            "the invitation email could not be sent; nothing was created", field="email"
        ) from error
    return IssuedInvitation(invitation=invitation, token=None, link=None)


def _parse(token: Any) -> str | None:
    """The token's prefix, or None when it is not shaped like one of ours."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_LENGTH:
        return None
    if not token.startswith(TOKEN_PREFIX):
        return None
    prefix, separator, secret = token[len(TOKEN_PREFIX) :].partition("_")
    if not separator or not secret or len(prefix) != PREFIX_HEX_CHARS:
        return None
    return prefix


def invitation_for_token(
    *, token: Any, now: datetime | None = None, for_update: bool = False
) -> MemberInvitation:
    """The pending invitation `token` is, or a refusal: 404 when no invitation has this token
    (a token of ours with its secret changed included: the answer does not say that its
    prefix exists), 410 when it was used, revoked or has expired."""
    prefix = _parse(token)
    # The token is the authority, before any tenant is known: a lookup across tenants.
    rows = MemberInvitation.platform.select_related("tenant")
    if for_update:
        rows = rows.select_for_update(of=("self",))
    invitation = rows.filter(token_prefix=prefix).first() if prefix else None
    # Compared even when no row matched, so that the time taken says nothing either.
    expected = invitation.token_hash if invitation is not None else _digest("")
    if not token_source.compare_digest(expected, _digest(str(token))) or invitation is None:
        raise NotFound("no invitation has this token (check the link)", field="token")
    status = invitation.status_at(_now(now))
    if status == "accepted":
        raise Gone("this invitation was already used", field="token")
    if status == "revoked":
        raise Gone("this invitation was revoked by the tenant's admin", field="token")
    if status == "expired":
        raise Gone(
            f"this invitation expired at {invitation.expires_at:%Y-%m-%d %H:%M} UTC; "
            "ask the tenant's admin for a new one",
            field="token",
        )
    if not invitation.tenant.is_active:
        raise Gone("the tenant of this invitation is not active", field="token")
    return invitation


def _used(invitation: MemberInvitation, *, user: Any, now: datetime) -> None:
    """Mark it used, once: the row is locked, and the UPDATE asks again that it is pending."""
    updated = MemberInvitation.objects.filter(
        tenant_id=invitation.tenant_id,
        id=invitation.id,
        accepted_at__isnull=True,
        revoked_at__isnull=True,
        expires_at__gt=now,
    ).update(accepted_at=now, accepted_by=user)
    if updated != 1:
        raise Gone("this invitation can no longer be used", field="token")


def _join(invitation: MemberInvitation, *, user: Any, now: datetime, new_account: bool):
    _used(invitation, user=user, now=now)
    membership = membership_set(tenant=invitation.tenant, user=user, role=invitation.role)
    audit_record(
        tenant=invitation.tenant,
        actor=f"user:{user.get_username()}",
        action="invitation.accept",
        object_type="member",
        object_id=str(membership.id),
        detail={
            "role": invitation.role,
            "invited_by": invitation.invited_by,
            "invitation": str(invitation.id),
            "new_account": new_account,
        },
    )
    return membership


@transaction.atomic
def invitation_accept_signed_in(
    *, token: Any, user: Any, now: datetime | None = None
) -> TenantMembership:
    """Accept with the account the person is signed in with."""
    at = _now(now)
    invitation = invitation_for_token(token=token, now=at, for_update=True)
    if TenantMembership.objects.filter(tenant=invitation.tenant, user=user).exists():
        raise Conflict(
            f"you are already a member of {invitation.tenant.slug}; the invitation stays unused"
        )
    return _join(invitation, user=user, now=at, new_account=False)


def _checked_username(username: Any) -> str:
    users = get_user_model()
    if not isinstance(username, str) or not username.strip():
        raise ValidationFailed("choose a user name", field="username")
    username = users.normalize_username(username.strip())
    field = users._meta.get_field(users.USERNAME_FIELD)
    try:
        field.run_validators(username)
    except DjangoValidationError as error:
        raise ValidationFailed(" ".join(error.messages), field="username") from error
    if len(username) > (field.max_length or 150):
        raise ValidationFailed(f"at most {field.max_length} characters", field="username")
    return username


@transaction.atomic
def invitation_accept_new_account(
    *, token: Any, username: Any, password: Any, now: datetime | None = None
) -> TenantMembership:
    """Accept with a new account: the user name and password are the invitee's own choice
    (Django's password validators apply). A name already taken is refused, never joined."""
    at = _now(now)
    invitation = invitation_for_token(token=token, now=at, for_update=True)
    username = _checked_username(username)
    if not isinstance(password, str) or not password:
        raise ValidationFailed("choose a password", field="password")
    users = get_user_model()
    try:
        validate_password(password, user=users(username=username))
    except DjangoValidationError as error:
        raise ValidationFailed(" ".join(error.messages), field="password") from error
    try:
        with transaction.atomic():
            user = users.objects.create_user(username=username, password=password)
    except IntegrityError as error:
        raise Conflict(
            f"the user name {username!r} is taken: choose another, or sign in with your own "
            "account and accept there",
            field="username",
        ) from error
    return _join(invitation, user=user, now=at, new_account=True)


def invitation_revoke(
    *, tenant: Tenant, invitation_id: Any, actor: str = "", now: datetime | None = None
) -> None:
    """Revoke a pending invitation of `tenant`: its token stops working at once."""
    invitation = selectors.invitation_get(tenant=tenant, invitation_id=invitation_id)
    at = _now(now)
    revoked = MemberInvitation.objects.filter(
        tenant_id=invitation.tenant_id,
        id=invitation.id,
        accepted_at__isnull=True,
        revoked_at__isnull=True,
    ).update(revoked_at=at)
    if not revoked:
        raise Conflict(f"this invitation is {invitation.status_at(at)}: nothing to revoke")
    audit_record(
        tenant=tenant,
        actor=actor or "system",
        action="invitation.revoke",
        object_type="invitation",
        object_id=str(invitation.id),
    )
