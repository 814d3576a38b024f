"""The test runs' Redis db claims: a killed run's claims are taken over, a live run's are not."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid

import pytest
import redis
from django.conf import settings

from project.settings import test_redis


@pytest.fixture
def claims(monkeypatch):
    """The claim functions on keys of this test's own (the real ones belong to live runs)."""
    prefix = f"scheduler-tests:claims-test-{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(test_redis, "CLAIM_KEY", prefix + ":{number}")
    monkeypatch.setattr(test_redis, "FIRST_DB", 14)
    monkeypatch.setattr(test_redis, "LAST_DB", 15)
    monkeypatch.setattr(test_redis, "CLAIM_WAIT_SECONDS", 0.0)
    admin = redis.Redis.from_url(test_redis._with_db(settings.REDIS_URL, 0))
    # Only the keys are claimed here: flushing a db another run holds must not happen.
    monkeypatch.setattr(redis.Redis, "flushdb", lambda self, *a, **k: True)
    yield admin, prefix
    for key in admin.keys(prefix + ":*"):
        admin.delete(key)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_killed_runs_claims_are_taken_over_and_a_live_runs_are_waited_for(claims):
    admin, prefix = claims
    host = socket.gethostname()
    admin.set(f"{prefix}:14", f"gone:gw0|{host}|{_dead_pid()}")
    admin.set(f"{prefix}:15", f"alive:gw1|{host}|{os.getppid()}")
    url, number = test_redis.claim_redis_db(settings.REDIS_URL, owner="me:gw0")
    assert number == 14 and url.endswith("/14")
    assert admin.get(f"{prefix}:14").decode() == f"me:gw0|{host}|{os.getpid()}"
    # Only the live run's number is left: not taken, a clear error after the wait.
    with pytest.raises(RuntimeError, match="held by a live test run"):
        test_redis.claim_redis_db(settings.REDIS_URL, owner="me:gw1")
    assert admin.get(f"{prefix}:15").decode().startswith("alive:gw1|")
    test_redis.release_redis_db(settings.REDIS_URL, 14, owner="me:gw0")
    assert admin.get(f"{prefix}:14") is None


def test_another_hosts_claim_is_left_to_its_expiry(claims):
    admin, prefix = claims
    admin.set(f"{prefix}:14", "far:gw0|another-host|1")
    admin.set(f"{prefix}:15", "old-format-owner")
    with pytest.raises(RuntimeError):
        test_redis.claim_redis_db(settings.REDIS_URL, owner="me:gw0")
