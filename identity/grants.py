"""From the identity provider's groups to (tenant, role) grants: plain Python, no Django.

The settings parse `OIDC_GROUP_ROLES` with `group_roles_parse` once, at start-up (a typo is a
start-up error naming the entry, not a login that silently grants nothing); every login, and
every API call with a provider token, maps the token's groups with `grants_from_claims`. The
dashboard's login and the API decide with this one function, so a group gives the same role
in both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ROLES = ("viewer", "operator", "admin")  # lowest first: a user in two groups gets the higher
_RANK = {role: rank for rank, role in enumerate(ROLES)}

GroupRoles = dict[str, tuple[tuple[str, str], ...]]


class GroupRolesInvalid(ValueError):
    """`OIDC_GROUP_ROLES` cannot be read; the message names the entry."""


def group_roles_parse(raw: str) -> GroupRoles:
    """`"ops=acme:operator,admins=acme:admin,ops=beta:viewer"` -> {"ops": (("acme",
    "operator"), ("beta", "viewer")), "admins": (("acme", "admin"),)}. A group may be named
    more than once (one group, several tenants); the group part may itself hold `=` or `:`
    only before the last `=` (Entra's group ids and Keycloak's `/paths` have neither)."""
    mapping: dict[str, list[tuple[str, str]]] = {}
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        group, sep, target = entry.rpartition("=")
        tenant, colon, role = target.partition(":")
        group, tenant, role = group.strip(), tenant.strip(), role.strip().lower()
        if not sep or not colon or not group or not tenant:
            raise GroupRolesInvalid(f"OIDC_GROUP_ROLES entry {entry!r} is not group=tenant:role")
        if role not in _RANK:
            raise GroupRolesInvalid(
                f"OIDC_GROUP_ROLES entry {entry!r}: role must be one of {', '.join(ROLES)}"
            )
        mapping.setdefault(group, []).append((tenant, role))
    return {group: tuple(targets) for group, targets in mapping.items()}


def claim_groups(claims: Mapping[str, Any], claim: str) -> list[str]:
    """The groups a token names under `claim`, a dotted path for providers that nest them
    (Keycloak's `realm_access.roles`). A list of names, or one string of names separated by
    spaces or commas; anything else (a number, an object) names no group."""
    value: Any = claims
    for part in claim.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if isinstance(value, str):
        return [name for name in value.replace(",", " ").split() if name]
    if isinstance(value, list | tuple):
        return [name for name in value if isinstance(name, str) and name]
    return []


def grants_from_claims(
    claims: Mapping[str, Any], *, claim: str, group_roles: GroupRoles
) -> dict[str, str]:
    """{tenant slug: role} for the groups the claims name, the highest role per tenant.
    Groups the mapping does not name grant nothing; empty means the user is refused."""
    grants: dict[str, str] = {}
    for group in claim_groups(claims, claim):
        for tenant, role in group_roles.get(group, ()):
            if tenant not in grants or _RANK[role] > _RANK[grants[tenant]]:
                grants[tenant] = role
    return grants


def mapped_tenants(group_roles: GroupRoles) -> set[str]:
    """The tenants whose memberships the provider owns: every tenant the mapping names. A
    member of another tenant (an invitation accepted) keeps that membership whatever the
    provider says."""
    return {tenant for targets in group_roles.values() for tenant, _ in targets}
