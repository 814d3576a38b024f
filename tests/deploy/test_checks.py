"""The startup system checks fire on bad settings, with their stable ids."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.core.checks import run_checks

from project import checks

ROOT = Path(__file__).resolve().parents[2]


def _ids(messages) -> set[str]:
    return {m.id for m in messages}


@pytest.mark.needs_os_tool("bubblewrap")
def test_clean_on_the_test_settings():
    assert not [m for m in run_checks() if m.id.startswith("scheduler.")]


def test_redis_evicting_keys_is_an_error():
    assert _ids(checks.redis_policy_errors("allkeys-lru")) == {"scheduler.E001"}
    assert checks.redis_policy_errors("noeviction") == []


def test_redis_check_reads_the_real_server_policy(settings):
    # The test Redis is configured for a queue: the live check passes.
    settings.SCHEDULER_CHECK_REDIS = True
    assert checks.check_redis_eviction() == []


def test_live_logs_in_the_brokers_own_database_is_a_warning(settings):
    assert checks.check_live_logs_apart() == []  # the test settings keep them apart
    settings.LIVE_LOGS_REDIS_URL = settings.REDIS_URL.replace("redis://", "redis://u:p@")
    assert _ids(checks.check_live_logs_apart()) == {"scheduler.W007"}
    settings.LIVE_LOGS_REDIS_URL = "redis://redis-logs:6379/0"
    assert checks.check_live_logs_apart() == []


def test_an_egress_network_that_is_not_one_is_an_error(settings):
    settings.WORKER = {**settings.WORKER, "EGRESS_ALLOWED_NETWORKS": ["10.20.0.0/16", "intranet"]}
    (error,) = checks.check_egress_networks()
    assert error.id == "scheduler.E133" and "'intranet' is not an IP network" in error.msg
    settings.WORKER = {**settings.WORKER, "EGRESS_ALLOWED_NETWORKS": ["10.20.0.0/16"]}
    assert checks.check_egress_networks() == []


def test_visibility_timeout_shorter_than_the_longest_task_is_an_error(settings):
    settings.SCHEDULER_MAX_TASK_TIMEOUT = 7200
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
    assert _ids(checks.check_visibility_timeout()) == {"scheduler.E003"}
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 7300}
    assert checks.check_visibility_timeout() == []


def test_missing_keys_in_production_are_errors(settings):
    settings.SCHEDULER_PRODUCTION = True
    settings.SECRET_KEY = "missing"
    settings.SECRETS_KEY = ""
    assert _ids(checks.check_keys()) == {"scheduler.E004", "scheduler.E005"}
    settings.SECRET_KEY = "change-me-to-a-long-random-string-of-at-least-fifty-characters-0123"
    settings.SECRETS_KEY = "configured"
    assert _ids(checks.check_keys()) == {"scheduler.E004", "scheduler.E005"}
    settings.SECRET_KEY = "Zq8" + "-production-secret-key-0123456789-abcdefghijklmnopqrstuvw"
    settings.SECRETS_KEY = Fernet.generate_key().decode()
    assert checks.check_keys() == []
    settings.SCHEDULER_PRODUCTION = False
    settings.SECRET_KEY = "missing"
    assert checks.check_keys() == []  # local and test runs use the development default


@pytest.mark.parametrize("setting", ["CELERY_ACCEPT_CONTENT", "CELERY_TASK_SERIALIZER"])
def test_pickle_is_an_error(settings, setting):
    setattr(settings, setting, ["json", "pickle"] if setting.endswith("CONTENT") else "pickle")
    assert _ids(checks.check_serializers()) == {"scheduler.E006"}


def _check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SECRET", "DJANGO_"))}
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={**base, "DJANGO_SETTINGS_MODULE": "project.settings.production", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.needs_os_tool("bubblewrap")
def test_check_deploy_is_clean_with_production_settings():
    result = _check_deploy(
        {
            "SECRET_KEY": "p" * 20 + "-production-secret-key-0123456789-abcdefghijklmnop",
            "SECRETS_KEY": Fernet.generate_key().decode(),
            "ALLOWED_HOSTS": "scheduler.example.com",
            "DATABASE_URL": "postgres://scheduler@db.invalid:5432/scheduler",
            "MANUAL_BASE_URL": "https://scheduler.example.com/manual",
        }
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_names_missing_keys():
    # The production settings refuse to load at all (tests/deploy/test_keys_refusal.py).
    result = _check_deploy(
        {
            "ALLOWED_HOSTS": "x.example.com",
            "DATABASE_URL": "postgres://scheduler@db.invalid:5432/scheduler",
        }
    )
    assert result.returncode != 0
    assert "SECRET_KEY is not set" in result.stderr
    assert "SECRETS_KEY is not set" in result.stderr


@pytest.mark.needs_os_tool("bubblewrap")
def test_the_shell_sandbox_check_says_which(settings):
    assert checks.check_shell_sandbox() == []  # bubblewrap works here: nothing to say
    settings.WORKER = {**settings.WORKER, "SHELL_BWRAP": "/nonexistent/bwrap"}
    (unavailable,) = checks.check_shell_sandbox()
    assert unavailable.id == "scheduler.W131" and "not installed" in unavailable.msg
    settings.WORKER = {**settings.WORKER, "SHELL_SANDBOX": "off"}
    assert _ids(checks.check_shell_sandbox()) == {"scheduler.W132"}
    settings.WORKER = {**settings.WORKER, "SHELL_SANDBOX": "of"}
    assert _ids(checks.check_shell_sandbox()) == {"scheduler.E130"}
