"""GET /api/v1/: the API root lists its endpoints as links and points to the docs."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_the_api_root_lists_the_endpoints_and_points_to_the_docs():
    response = Client().get("/api/v1/")
    assert response.status_code == 200
    body = response.json()
    assert body["docs"] == "http://testserver/api/docs/"
    assert Client().get(urlparse(body["docs"]).path).status_code == 200
    endpoints = body["endpoints"]
    for name in ("token-obtain", "task-list", "execution-list", "dag-list", "audit-list"):
        assert name in endpoints, name
    # Every link leads somewhere: anonymous callers are refused or told the method, never 404.
    for name, url in endpoints.items():
        status = Client().get(urlparse(url).path).status_code
        assert status in (200, 401, 403, 405), (name, url, status)
