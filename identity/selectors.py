"""Reads for single sign-on: the tenants a provider's grants name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings

from identity.grants import grants_from_claims
from scheduler_app.models import Tenant


def provider_grants(*, claims: Mapping[str, Any]) -> list[tuple[Tenant, str]]:
    """(tenant, role) for each active tenant the token's groups map to, by slug. A tenant
    the mapping names that does not exist (or is deactivated) grants nothing."""
    grants = grants_from_claims(
        claims, claim=settings.OIDC_GROUPS_CLAIM, group_roles=settings.OIDC_GROUP_ROLES
    )
    if not grants:
        return []
    tenants = Tenant.objects.filter(slug__in=list(grants), is_active=True).order_by("slug")
    return [(tenant, grants[tenant.slug]) for tenant in tenants]
