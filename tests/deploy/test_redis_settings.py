"""REDIS_SENTINELS turns every Redis client into a Sentinel-managed one: the URL forms the
settings derive, checked without a Sentinel (tests/integration/test_redis_sentinel.py
fails a real one over)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from project.settings.env import sentinel_url

ROOT = Path(__file__).resolve().parents[2]


def test_sentinel_url_keeps_the_masters_password_and_database():
    url = sentinel_url(["s1:26379", "s2:26380"], redis_url="redis://:pw@ignored:6379/3")
    assert url == "sentinel://:pw@s1:26379/3;sentinel://:pw@s2:26380/3"
    assert sentinel_url(["s1:26379"], redis_url="redis://x") == "sentinel://s1:26379/0"


def _settings_with(env: dict[str, str]) -> str:
    code = (
        "from django.conf import settings as s; import json; print(json.dumps(["
        "s.CELERY_BROKER_URL, s.CELERY_RESULT_BACKEND, "
        "s.CELERY_BROKER_TRANSPORT_OPTIONS, s.CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS]))"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "REDIS_"))}
    clean["DJANGO_SETTINGS_MODULE"] = "project.settings"
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); " + code],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_sentinels_route_the_broker_and_the_result_backend():
    import json

    broker, backend, broker_options, backend_options = json.loads(
        _settings_with(
            {
                "REDIS_URL": "redis://:secret@unused/2",
                "REDIS_SENTINELS": "a:26379,b:26379",
                "REDIS_SENTINEL_MASTER": "prod",
                "REDIS_SENTINEL_PASSWORD": "sentinel-pw",
            }
        )
    )
    assert broker == backend == "sentinel://:secret@a:26379/2;sentinel://:secret@b:26379/2"
    for options in (broker_options, backend_options):
        assert options["master_name"] == "prod"
        assert options["sentinel_kwargs"] == {"password": "sentinel-pw"}


def test_without_sentinels_nothing_changes():
    import json

    broker, backend, broker_options, backend_options = json.loads(
        _settings_with({"REDIS_URL": "redis://h:6379/1"})
    )
    assert broker == backend == "redis://h:6379/1"
    assert "master_name" not in broker_options and backend_options == {}


def _urls_with(env: dict[str, str]) -> list[str]:
    import json

    code = (
        "from django.conf import settings as s; import json; print(json.dumps(["
        "s.REDIS_URL, s.LIVE_LOGS_REDIS_URL, s.CELERY_BROKER_URL, s.CELERY_RESULT_BACKEND]))"
    )
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "REDIS_", "LIVE_LOGS_"))
    }
    clean["DJANGO_SETTINGS_MODULE"] = "project.settings"
    out = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); " + code],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


def test_a_process_connects_everywhere_as_its_redis_user(tmp_path):
    """Broker, result backend, the app's client and the live-log Redis all carry the
    credentials (deploy/redis/: one ACL user per kind of process)."""
    password = tmp_path / "password"
    password.write_text("s3cr/t:pw\n")  # a mounted Secret: read, stripped, quoted
    urls = _urls_with(
        {
            "REDIS_URL": "redis://redis:6379/0",
            "LIVE_LOGS_REDIS_URL": "redis://redis-logs:6379/0",
            "REDIS_USERNAME": "worker",
            "REDIS_PASSWORD_FILE": str(password),
        }
    )
    assert urls == [
        "redis://worker:s3cr%2Ft%3Apw@redis:6379/0",
        "redis://worker:s3cr%2Ft%3Apw@redis-logs:6379/0",
        "redis://worker:s3cr%2Ft%3Apw@redis:6379/0",
        "redis://worker:s3cr%2Ft%3Apw@redis:6379/0",
    ]
    # Without a LIVE_LOGS_REDIS_URL: the next database of the same server, same user.
    assert (
        _urls_with(
            {"REDIS_URL": "redis://h:6379/3", "REDIS_USERNAME": "web", "REDIS_PASSWORD": "pw"}
        )[1]
        == "redis://web:pw@h:6379/4"
    )
    # A URL that names its own credentials keeps them.
    assert (
        _urls_with({"REDIS_URL": "redis://other:theirs@h:6379/0", "REDIS_PASSWORD": "pw"})[0]
        == "redis://other:theirs@h:6379/0"
    )


def test_sentinel_url_keeps_the_masters_user():
    url = sentinel_url(["s1:26379"], redis_url="redis://worker:pw@ignored:6379/0")
    assert url == "sentinel://worker:pw@s1:26379/0"
