"""Tenant members: add (creating the user if asked), change role, remove."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction

from scheduler_app.choices import Role
from scheduler_app.errors import Conflict, ValidationFailed
from scheduler_app.models import Tenant, TenantMembership
from scheduler_app.services.tenants import membership_set


@transaction.atomic
def member_add(
    *, tenant: Tenant, username: str, role: str, password: str | None = None
) -> TenantMembership:
    users = get_user_model()
    user = users.objects.filter(username=username).first()
    if user is None:
        if not password:
            raise ValidationFailed(
                f"user {username!r} does not exist; give a password to create it",
                field="password",
            )
        user = users.objects.create_user(username=username, password=password)
    if TenantMembership.objects.filter(tenant=tenant, user=user).exists():
        raise Conflict(f"{username!r} is already a member", field="username")
    return membership_set(tenant=tenant, user=user, role=role)


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
