"""Tenant members: change a member's role, remove a member. A tenant keeps one admin at least.

Members join only by accepting an invitation (scheduler_app/services/invitations.py): a
tenant admin never creates, names or changes a platform account.
"""

from __future__ import annotations

from django.db import transaction

from scheduler_app.choices import Role
from scheduler_app.errors import Conflict
from scheduler_app.models import Tenant, TenantMembership
from scheduler_app.services.audit import audit_action
from scheduler_app.services.tenants import membership_set


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
    before = member.role
    updated = membership_set(tenant=member.tenant, user=member.user, role=role)
    if before != role:
        _audit(member, "member.update", before={"role": before}, after={"role": role})
    return updated


@transaction.atomic
def member_remove(*, member: TenantMembership) -> None:
    if member.role == Role.ADMIN and not _admins_left(member.tenant, without=member):
        raise Conflict("a tenant keeps at least one admin")
    if TenantMembership.objects.filter(tenant_id=member.tenant_id, id=member.id).delete()[0]:
        _audit(member, "member.delete", before={"user": member.user.username, "role": member.role})


def _audit(member: TenantMembership, verb: str, **change) -> None:
    audit_action(
        tenant=member.tenant, verb=verb, object_type="member", object_id=member.id, **change
    )
