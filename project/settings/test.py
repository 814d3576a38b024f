"""Settings for `make test`: real PostgreSQL and Redis, each run in its own database and
Redis db number so that two runs (or a run and a developer's stack) never meet."""

from __future__ import annotations

import atexit
import os
import uuid

from project.settings.base import *  # noqa: F403
from project.settings.base import (
    DATABASE_TRANSACTION_POOLING,
    FLEET,
    LIFECYCLE,
    SCHEDULER,
    STORAGES,
)
from project.settings.env import (
    database_from_url,
    env_secret,
    env_str,
    redis_neighbour_database_url,
)
from project.settings.test_redis import claim_redis_db, release_redis_db

RUN_ID = os.environ.setdefault("SCHEDULER_TEST_RUN_ID", uuid.uuid4().hex[:10])
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")

DATABASES = {
    "default": database_from_url(
        env_secret("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    )
}
# pytest-django appends the xdist worker's suffix (_gw0, _gw1, ...) to this name.
DATABASES["default"]["TEST"] = {"NAME": f"test_sched_{RUN_ID}"}
DATABASES["default"]["CONN_MAX_AGE"] = 0
DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = DATABASE_TRANSACTION_POOLING

WITHOUT_SERVICES = os.environ.get("SCHEDULER_TESTS_WITHOUT_SERVICES") == "1"
_BASE_REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
_OWNER = f"{RUN_ID}:{XDIST_WORKER}"
if WITHOUT_SERVICES:
    REDIS_URL, REDIS_TEST_DB = _BASE_REDIS_URL, None
    LIVE_LOGS_REDIS_URL, LIVE_LOGS_TEST_DB = redis_neighbour_database_url(REDIS_URL), None
else:
    # Two db numbers: the broker's and the live log tails' (apart, as in every deployment).
    REDIS_URL, REDIS_TEST_DB = claim_redis_db(_BASE_REDIS_URL, owner=_OWNER)
    LIVE_LOGS_REDIS_URL, LIVE_LOGS_TEST_DB = claim_redis_db(_BASE_REDIS_URL, owner=_OWNER)
    # Any process that loads these settings gives its dbs back when it exits, not only a
    # pytest session (whose sessionfinish also does): `manage.py spectacular` run by a test,
    # the xdist controller, a developer's shell. Only a killed process waits for the expiry.
    for _number in (REDIS_TEST_DB, LIVE_LOGS_TEST_DB):
        atexit.register(release_redis_db, _BASE_REDIS_URL, _number, owner=_OWNER)
LIVE_LOGS_REDIS_URL_DERIVED = False
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
SCHEDULER = {**SCHEDULER, "REDIS_KEY_PREFIX": f"test:{RUN_ID}:{XDIST_WORKER}:"}
# WhiteNoise serves the apps' static folders directly (no collectstatic per test run); the
# browser tests drive `manage.py runstack`, which collects and serves the hashed files.
STORAGES = {
    **STORAGES,
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast, tests only
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
# Beats and workers started by the tests must not hand out retention or statistics runs
# (they would scan and lock the executions table under other tests); the lifecycle tests
# call those services directly.
LIFECYCLE = {**LIFECYCLE, "RETENTION_RUN_SECONDS": 0.0, "STATS_REFRESH_SECONDS": 0.0}
# Many tests fail runs within one minute of one process, and the retry budget counts them
# all: it would defer a test's retry to the next minute. The budget's own tests set theirs.
FLEET = {**FLEET, "RETRY_BUDGET_MIN_PER_MINUTE": 100_000}
