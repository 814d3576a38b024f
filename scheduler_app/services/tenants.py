"""Tenants and who belongs to them."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils.text import slugify

from scheduler_app.choices import Role
from scheduler_app.errors import Conflict, ValidationFailed
from scheduler_app.models import Tenant, TenantMembership


def tenant_create(*, slug: str, name: str = "") -> Tenant:
    if slugify(slug) != slug or not slug:
        raise ValidationFailed(
            f"{slug!r} is not a valid slug (lowercase letters, digits, -)", field="slug"
        )
    if Tenant.objects.filter(slug=slug).exists():
        raise Conflict(f"tenant {slug!r} already exists", field="slug")
    return Tenant.objects.create(slug=slug, name=name or slug)


def membership_set(*, tenant: Tenant, user, role: str) -> TenantMembership:
    if role not in Role.values:
        raise ValidationFailed(f"role must be one of {', '.join(Role.values)}", field="role")
    membership, _ = TenantMembership.objects.update_or_create(
        tenant=tenant, user=user, defaults={"role": role}
    )
    return membership


@transaction.atomic
def tenant_create_with_admin(
    *, slug: str, username: str, password: str, name: str = "", email: str = "", staff: bool = False
) -> tuple[Tenant, object]:
    """A tenant and its first admin user (created, or given the role if the user exists)."""
    if not password:
        raise ValidationFailed("a password is required", field="password")
    tenant = tenant_create(slug=slug, name=name)
    users = get_user_model()
    user = users.objects.filter(username=username).first()
    if user is None:
        user = users.objects.create_user(username=username, email=email, password=password)
    if staff and not user.is_staff:
        user.is_staff = True
        user.is_superuser = True
        user.save(update_fields=["is_staff", "is_superuser"])
    membership_set(tenant=tenant, user=user, role=Role.ADMIN)
    return tenant, user
