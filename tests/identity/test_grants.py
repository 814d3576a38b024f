"""The mapping of the provider's groups to tenants and roles (pure: identity/grants.py)."""

from __future__ import annotations

import pytest

from identity.grants import (
    GroupRolesInvalid,
    grants_from_claims,
    group_roles_parse,
    mapped_tenants,
)


def test_the_mapping_reads_several_tenants_per_group_and_keeps_the_highest_role():
    roles = group_roles_parse("ops=acme:operator, admins=acme:Admin,ops=beta:viewer,,")
    assert roles == {
        "ops": (("acme", "operator"), ("beta", "viewer")),
        "admins": (("acme", "admin"),),
    }
    assert mapped_tenants(roles) == {"acme", "beta"}
    claims = {"groups": ["ops", "admins", "unmapped"]}
    assert grants_from_claims(claims, claim="groups", group_roles=roles) == {
        "acme": "admin",
        "beta": "viewer",
    }
    assert grants_from_claims({"groups": ["unmapped"]}, claim="groups", group_roles=roles) == {}


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ("ops", "'ops'"),
        ("ops=acme", "'ops=acme'"),
        ("=acme:admin", "'=acme:admin'"),
        ("ops=acme:root", "role must be one of viewer, operator, admin"),
    ],
)
def test_a_typo_in_the_mapping_is_refused_naming_the_entry(raw, named):
    with pytest.raises(GroupRolesInvalid, match=named):
        group_roles_parse(f"viewers=acme:viewer,{raw}")


def test_groups_from_a_string_a_nested_claim_and_nothing_from_other_shapes():
    roles = group_roles_parse("ops=acme:operator,example.com=acme:viewer")
    nested = {"realm_access": {"roles": ["ops", 3]}}
    assert grants_from_claims(nested, claim="realm_access.roles", group_roles=roles) == {
        "acme": "operator"
    }
    assert grants_from_claims({"hd": "example.com"}, claim="hd", group_roles=roles) == {
        "acme": "viewer"
    }
    for shape in ({"groups": 7}, {"groups": {"ops": True}}, {}):
        assert grants_from_claims(shape, claim="groups", group_roles=roles) == {}
