from __future__ import annotations

import os

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from rest_framework.test import APIClient

from scheduler_app.services.tenants import tenant_create_with_admin

# Property tests check correctness, not speed: on a loaded 2-core machine (CI runs the suite
# beside real workers) an example may exceed hypothesis's default 200 ms deadline.
hypothesis_settings.register_profile(
    "suite", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile("suite")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from project.settings.test_redis import release_redis_db

    number = getattr(settings, "REDIS_TEST_DB", None)
    if number is not None:
        owner = f"{settings.RUN_ID}:{settings.XDIST_WORKER}"
        release_redis_db(
            os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), number, owner=owner
        )


SERVICE_FIXTURES = {"db", "transactional_db", "django_db_setup", "redis_client", "live_worker"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("SCHEDULER_TESTS_WITHOUT_SERVICES") != "1":
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL and Redis (not reachable)")
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if (
            item.get_closest_marker("django_db")
            or item.get_closest_marker("integration")
            or (fixtures & SERVICE_FIXTURES)
        ):
            item.add_marker(skip)


@pytest.fixture
def redis_client():
    from scheduler_app.redis_client import get_redis

    return get_redis()


@pytest.fixture
def tenant_factory(db):
    created = []

    def make(slug: str = "acme", username: str | None = None, password: str = "pw-123456"):
        tenant, user = tenant_create_with_admin(
            slug=slug, username=username or f"{slug}-admin", password=password
        )
        created.append(tenant)
        return tenant, user

    return make


@pytest.fixture
def tenant_and_user(tenant_factory):
    return tenant_factory("acme")


@pytest.fixture
def tenant(tenant_and_user):
    return tenant_and_user[0]


@pytest.fixture
def api(tenant_and_user) -> APIClient:
    """An API client authenticated with a real JWT of the tenant's admin."""
    client = APIClient()
    _, user = tenant_and_user
    response = client.post(
        "/api/v1/auth/token", {"username": user.username, "password": "pw-123456"}, format="json"
    )
    assert response.status_code == 200, response.content
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {response.json()['access']}")
    return client


@pytest.fixture
def other_user(db):
    return get_user_model().objects.create_user(username="stranger", password="pw-123456")
