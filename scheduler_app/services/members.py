"""Tenant members: invite (creating the user if asked), accept, change role, remove.

A tenant admin never enrols a user directly: adding a user name creates an invitation, and
only the user it names can accept it. Otherwise any tenant's admin could enrol any platform
user (the superuser included) without consent. The admin's request gets the same answer
whether or not the user name exists, so it cannot be used to find out which ones do.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from scheduler_app import selectors
from scheduler_app.choices import Role
from scheduler_app.errors import Conflict, NotFound, ValidationFailed
from scheduler_app.models import MemberInvitation, Tenant, TenantMembership
from scheduler_app.services.audit import audit_record
from scheduler_app.services.tenants import membership_set

INVITATION_DAYS = 7


def _password_check(username: str, password: str) -> None:
    """Django's AUTH_PASSWORD_VALIDATORS, as if for a new user of that name (run whether or
    not the name exists, so the answer does not tell)."""
    try:
        validate_password(password, user=get_user_model()(username=username))
    except DjangoValidationError as error:
        raise ValidationFailed(" ".join(error.messages), field="password") from error


@transaction.atomic
def member_invite(
    *,
    tenant: Tenant,
    username: str,
    role: str,
    password: str | None = None,
    invited_by: str = "",
) -> MemberInvitation:
    """Invite `username` to `tenant` with `role` (again: the role and expiry are renewed).

    With a password and no such user, the user is created first (with that password, which
    must pass the validators); an existing user's password is never touched."""
    if password:
        _password_check(username, password)
    users = get_user_model()
    user = users.objects.filter(username=username).first()
    if user is not None and TenantMembership.objects.filter(tenant=tenant, user=user).exists():
        # The admin can list the tenant's members anyway: this tells nothing new.
        raise Conflict(f"{username!r} is already a member", field="username")
    if user is None and password:
        try:
            with transaction.atomic():
                user = users.objects.create_user(username=username, password=password)
        except IntegrityError:  # created meanwhile by someone else: invite, do not touch it
            user = users.objects.filter(username=username).first()
    invitation, _ = MemberInvitation.objects.update_or_create(
        tenant=tenant,
        username=username,
        defaults={
            "user": user,
            "role": role,
            "invited_by": invited_by[:255],
            "expires_at": timezone.now() + timedelta(days=INVITATION_DAYS),
        },
    )
    return invitation


def _pending_for(user: Any):
    return selectors.invitation_list_for_user(user=user)


def _own_invitation(*, user: Any, invitation_id: Any) -> MemberInvitation:
    try:
        wanted = uuid.UUID(str(invitation_id))
    except ValueError as error:
        raise NotFound("invitation not found") from error
    invitation = _pending_for(user).select_for_update(of=("self",)).filter(id=wanted).first()
    if invitation is None:
        raise NotFound("invitation not found")
    return invitation


@transaction.atomic
def invitation_accept(*, user: Any, invitation_id: Any) -> TenantMembership:
    invitation = _own_invitation(user=user, invitation_id=invitation_id)
    if TenantMembership.objects.filter(tenant=invitation.tenant, user=user).exists():
        MemberInvitation.objects.filter(id=invitation.id).delete()
        raise Conflict("you are already a member of this tenant")
    membership = membership_set(tenant=invitation.tenant, user=user, role=invitation.role)
    MemberInvitation.objects.filter(id=invitation.id).delete()
    audit_record(
        tenant=invitation.tenant,
        actor=f"user:{user.get_username()}",
        action="invitation.accept",
        object_type="member",
        object_id=str(membership.id),
        detail={"role": invitation.role, "invited_by": invitation.invited_by},
    )
    return membership


@transaction.atomic
def invitation_decline(*, user: Any, invitation_id: Any) -> None:
    invitation = _own_invitation(user=user, invitation_id=invitation_id)
    MemberInvitation.objects.filter(id=invitation.id).delete()


def invitation_revoke(*, tenant: Tenant, invitation_id: Any) -> None:
    try:
        wanted = uuid.UUID(str(invitation_id))
    except ValueError as error:
        raise NotFound("invitation not found") from error
    if not MemberInvitation.objects.filter(tenant=tenant, id=wanted).delete()[0]:
        raise NotFound("invitation not found")


def _admins_left(tenant: Tenant, *, without: TenantMembership) -> int:
    return (
        TenantMembership.objects.filter(tenant=tenant, role=Role.ADMIN)
        .exclude(id=without.id)
        .count()
    )


@transaction.atomic
def member_set_role(*, member: TenantMembership, role: str) -> TenantMembership:
    if (
        member.role == Role.ADMIN
        and role != Role.ADMIN
        and not _admins_left(member.tenant, without=member)
    ):
        raise Conflict("a tenant keeps at least one admin", field="role")
    return membership_set(tenant=member.tenant, user=member.user, role=role)


@transaction.atomic
def member_remove(*, member: TenantMembership) -> None:
    if member.role == Role.ADMIN and not _admins_left(member.tenant, without=member):
        raise Conflict("a tenant keeps at least one admin")
    TenantMembership.objects.filter(id=member.id).delete()
