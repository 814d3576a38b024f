"""Secrets: write-only values, encrypted at rest, resolved for their own tenant only, rotatable."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.test import override_settings

from scheduler_app.models import Secret
from scheduler_app.services.secrets import secret_create, secrets_resolve, substitute

pytestmark = pytest.mark.django_db

VALUE = "hunter2-super-secret"


def test_crud_never_returns_the_value_and_stores_it_encrypted(api, tenant):
    created = api.post("/api/v1/secrets", {"name": "db-url", "value": VALUE}, format="json")
    assert created.status_code == 201, created.content
    secret_id = created.json()["id"]
    assert created.json()["reference"] == "{{secret:db-url}}"
    for response in (
        created,
        api.get("/api/v1/secrets"),
        api.get(f"/api/v1/secrets/{secret_id}"),
        api.put(f"/api/v1/secrets/{secret_id}", {"value": VALUE + "-2"}, format="json"),
    ):
        assert response.status_code in (200, 201)
        assert VALUE not in response.content.decode()
    stored = Secret.platform.get(id=secret_id)
    assert VALUE not in stored.ciphertext
    assert secrets_resolve(tenant_id=tenant.id, names={"db-url"}) == {"db-url": VALUE + "-2"}
    assert (
        api.post("/api/v1/secrets", {"name": "db-url", "value": "x"}, format="json").status_code
        == 409
    )
    assert (
        api.post("/api/v1/secrets", {"name": "bad name!", "value": "x"}, format="json").json()[
            "field"
        ]
        == "name"
    )
    assert api.delete(f"/api/v1/secrets/{secret_id}").status_code == 204
    assert not Secret.platform.filter(id=secret_id).exists()


def test_a_secret_resolves_only_for_its_own_tenant(tenant_factory):
    tenant_a, _ = tenant_factory("aaa")
    tenant_b, _ = tenant_factory("bbb")
    secret_create(tenant=tenant_a, name="token", value="a-token")
    with pytest.raises(KeyError):
        secrets_resolve(tenant_id=tenant_b.id, names={"token"})


def test_references_are_substituted_in_nested_values():
    config = {"url": "https://x/{{secret:k}}", "headers": {"A": "Bearer {{ secret:k }}"}, "n": [1]}
    assert substitute(config, {"k": "v"}) == {
        "url": "https://x/v",
        "headers": {"A": "Bearer v"},
        "n": [1],
    }


def test_rotation_reencrypts_with_the_new_key_and_old_key_can_be_dropped(tenant):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    with override_settings(SECRETS_KEY=old):
        secret = secret_create(tenant=tenant, name="rotated", value=VALUE)
    with override_settings(SECRETS_KEY=f"{new},{old}"):
        call_command("rotate_secrets")
    with override_settings(SECRETS_KEY=new):
        assert secrets_resolve(tenant_id=tenant.id, names={"rotated"}) == {"rotated": VALUE}
    secret.refresh_from_db()
    assert Fernet(new.encode()).decrypt(secret.ciphertext.encode()).decode() == VALUE
