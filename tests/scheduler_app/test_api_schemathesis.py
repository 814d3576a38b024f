"""Property-based run of the whole API against its own OpenAPI schema (schemathesis).

Every operation gets generated requests (valid and not) as a tenant admin, in process over
WSGI against the test database; any 5xx or any response that does not match the schema
fails. Failover is excluded: it would ask a (non-existent) leader to step down, and is
covered by its own tests.
"""

from __future__ import annotations

import re

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
)

from tests.factories import make_task


@pytest.fixture
def admin_headers(tenant, api):
    tenant.rate_limit_per_minute = 1_000_000
    tenant.save(update_fields=["rate_limit_per_minute"])
    make_task(tenant, name="existing", schedule={"type": "manual"})
    return {"Authorization": api._credentials["HTTP_AUTHORIZATION"]}


@pytest.mark.django_db(transaction=True)
def test_api_conforms_to_its_schema(admin_headers):
    schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())
    checks = [not_a_server_error, response_schema_conformance, content_type_conformance]
    tested = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if "failover" in operation.path:
            continue

        @given(case=operation.as_strategy())
        @settings(
            max_examples=8,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def run(case):
            case.call_and_validate(headers=admin_headers, checks=checks)

        run()
        tested.append(f"{operation.method.upper()} {operation.path}")
    assert len(tested) >= 25, tested


@pytest.mark.django_db
def test_schema_and_swagger_ui_are_served_offline(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    for path in ("/api/v1/executions", "/api/v1/secrets", "/api/v1/admin/scheduler/status"):
        assert path in paths
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    page = docs.content.decode()
    assert "swagger-ui" in page
    asset_urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", page)
    assert asset_urls, page
    off_site = [url for url in asset_urls if not url.startswith("/") or url.startswith("//")]
    assert off_site == [], f"the docs page loads assets from elsewhere: {off_site}"
    assert re.findall(r"https?://", page) == [], "the docs page names another site"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "typed, found", [("/api/docs", "/api/docs/"), ("/api/schema", "/api/schema/")]
)
def test_the_docs_and_schema_typed_without_a_slash_redirect_to_them(client, typed, found):
    response = client.get(typed)
    assert response.status_code == 302
    assert response["Location"] == found
    assert client.get(typed, follow=True).status_code == 200
