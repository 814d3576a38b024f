from __future__ import annotations

import collections
import os
import uuid

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from rest_framework.test import APIClient

from scheduler_app.services.tenants import tenant_create_with_admin
from tests import os_suites

# The longest files first under xdist, and --record-durations (tests/suite_order.py); the
# single sign-on tests' OIDC provider (tests/oidc_provider.py).
pytest_plugins = ["tests.suite_order", "tests.oidc_provider"]

# Property tests check correctness, not speed: on a loaded 2-core machine (CI runs the suite
# beside real workers) an example may exceed hypothesis's default 200 ms deadline.
hypothesis_settings.register_profile(
    "suite", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile("suite")


def pytest_configure(config: pytest.Config) -> None:
    """Each process's test database is cloned from a migrated template (tests/db_template.py):
    the migrations ran once per schema, not once per xdist worker and run."""
    from tests import db_template

    db_template.install()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from project.settings.test_redis import release_redis_db

    owner = f"{settings.RUN_ID}:{settings.XDIST_WORKER}"
    for name in ("REDIS_TEST_DB", "LIVE_LOGS_TEST_DB"):
        number = getattr(settings, name, None)
        if number is not None:
            release_redis_db(
                os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), number, owner=owner
            )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Before a test's fixtures (its database among them) are torn down: a scheduler engine
    ticked in this process may have started an alert evaluation on a thread of its own,
    and its writes would race the test database's flush (a deadlock seen in CI-like runs)."""
    from alerting.beat_hook import alerts_evaluation_wait

    alerts_evaluation_wait(timeout=30)


@pytest.fixture(scope="session", autouse=True)
def _flush_by_delete():
    """A transactional test's flush deletes the rows it left instead of truncating every
    table (tests/db_flush.py: milliseconds instead of 1-2 s a test), and is tried again when
    a real worker or beat of the test is still finishing a write as its fixtures stop
    (fixtures quiesce what they know of; this is the backstop). A flush that failed left the
    next test a dirty database ('tenant already exists')."""
    from tests.db_flush import deleting_flush

    with deleting_flush():
        yield


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test databases, dropped without leftovers: a live-server thread still
    serving a request (a log stream the browser kept open) holds a session on the test
    database, and DROP DATABASE would fail and leave it behind. Those sessions are ended
    first; this teardown runs before pytest-django's own."""
    yield
    from django.db import connections

    with django_db_blocker.unblock():
        for alias in connections:
            connection = connections[alias]
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )


@pytest.fixture
def private_broker():
    """Broker queues of this test's own, under a unique key prefix: a test that starts, kills
    and counts its own workers, or plays the worker itself, uses this so that no other
    consumer of the same Redis db may take its runs. (The integration suites' shared worker
    reads queues of its own prefix already; see `live_worker`.)"""
    from tests.processes import broker_key_prefix

    with broker_key_prefix(f"private-{uuid.uuid4().hex[:10]}:") as prefix:
        yield prefix


SERVICES_SKIP_REASON = "needs PostgreSQL and Redis (not reachable)"
SERVICE_FIXTURES = {
    "db",
    "transactional_db",
    "django_db_setup",
    "redis_client",
    "live_worker",
    "shared_worker",
    # The single sign-on tests' provider keeps its users and clients in a PostgreSQL
    # database of its own (and with it the make-run stack of the browser tests).
    "oidc_provider",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    os_suites.mark_skips(items)
    if os.environ.get("SCHEDULER_TESTS_WITHOUT_SERVICES") != "1":
        return
    skip = pytest.mark.skip(reason=SERVICES_SKIP_REASON)
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


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Without PostgreSQL and Redis: which suites were skipped for want of them, by folder and
    file (on the xdist controller, from the workers' reports); and those that skipped for want
    of an OS tool (tests/os_suites.py)."""
    os_suites.summarize(terminalreporter)
    if os.environ.get("SCHEDULER_TESTS_WITHOUT_SERVICES") != "1":
        return
    skipped: dict[str, collections.Counter] = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if SERVICES_SKIP_REASON not in reason:
            continue
        path = report.nodeid.split("::", 1)[0]
        folder, _, name = path.rpartition("/")
        skipped.setdefault(folder, collections.Counter())[name] += 1
    if not skipped:
        return
    terminalreporter.section("skipped: these suites need PostgreSQL and Redis")
    for folder, files in sorted(skipped.items()):
        terminalreporter.write_line(
            f"{folder}/ ({sum(files.values())} tests): {', '.join(sorted(files))}"
        )
