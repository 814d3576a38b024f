"""With production settings, no process starts on a missing, placeholder or short key.

Each process is started for real, as a subprocess, the way docker-compose.yml starts it
(gunicorn on the WSGI app, the ASGI app as an ASGI server imports it, `celery worker`,
`celery beat`, `celery flower`, `manage.py`), and must exit non-zero naming the bad key.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from project.settings import keys

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GOOD_SECRET_KEY = "k7Hq2-xW9pLz4vR8mN3bT6yJ1cF5gD0sA-eU2iO7pQ4wE9rT1yU6iO3pA8sD5fG2hJ"
# A fixed valid Fernet key: test ids carry it, and every xdist worker must collect the same ids.
GOOD_SECRETS_KEY = "Vz1o4fK2m8QyJ3rT7wX0cB5nL9hD6sA2eU4iP8gR1tM="
ENV_EXAMPLE = dict(
    line.split("=", 1)
    for line in (ROOT / ".env.example").read_text().splitlines()
    if "=" in line and not line.startswith("#")
)
ENV_EXAMPLE_SECRET_KEY = ENV_EXAMPLE["SECRET_KEY"]
# Every other credential .env.example ships as a placeholder (PostgreSQL, Flower, Grafana, and
# whatever is added later): each must stop a production process by its name.
ENV_EXAMPLE_PLACEHOLDERS = sorted(
    name
    for name, value in ENV_EXAMPLE.items()
    if "change-me" in value and name not in ("SECRET_KEY", "SECRETS_KEY")
)


def _env(**keys_env: str) -> dict[str, str]:
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("SECRET", "DJANGO_", "CELERY"))
    }
    return {
        **base,
        "DJANGO_SETTINGS_MODULE": "project.settings.production",
        "ALLOWED_HOSTS": "scheduler.example.com",
        "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/postgres",
        # Nothing must reach a real broker: a process that started would stay up instead.
        "REDIS_URL": "redis://127.0.0.1:1/0",
        **keys_env,
    }


def _run(argv: list[str], env: dict[str, str], timeout: float = 90) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as expired:  # it started: that is the failure
        raise AssertionError(f"{argv} started with a bad key: {expired.stderr!r}") from None


def _processes(tmp_path: Path) -> dict[str, list[str]]:
    return {
        "gunicorn-wsgi": [
            str(BIN / "gunicorn"),
            "project.wsgi:application",
            "--bind",
            f"unix:{tmp_path / 'web.sock'}",
            "--workers",
            "1",
        ],
        "asgi-import": [sys.executable, "-c", "import project.asgi"],
        "celery-worker": [str(BIN / "celery"), "-A", "project", "worker", "--pool", "solo"],
        "celery-beat": [
            str(BIN / "celery"),
            "-A",
            "project",
            "beat",
            "-S",
            "beat:LeaderScheduler",
            f"--pidfile={tmp_path / 'beat.pid'}",
        ],
        "celery-flower": [str(BIN / "celery"), "-A", "project", "flower", "--port=0"],
        "manage-migrate": [sys.executable, "manage.py", "migrate", "--check"],
    }


@pytest.mark.parametrize(
    "process",
    [
        "gunicorn-wsgi",
        "asgi-import",
        "celery-worker",
        "celery-beat",
        "celery-flower",
        "manage-migrate",
    ],
)
def test_every_process_refuses_to_start_without_keys(process, tmp_path):
    result = _run(_processes(tmp_path)[process], _env())
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "refusing to start with production settings" in output
    assert "SECRET_KEY is not set" in output
    assert "SECRETS_KEY is not set" in output


@pytest.mark.parametrize(
    ("secret_key", "secrets_key", "named"),
    [
        (ENV_EXAMPLE_SECRET_KEY, GOOD_SECRETS_KEY, "SECRET_KEY is a placeholder"),
        (keys.DEVELOPMENT_SECRET_KEY, GOOD_SECRETS_KEY, "SECRET_KEY is a placeholder"),
        ("missing", GOOD_SECRETS_KEY, "SECRET_KEY is a placeholder"),
        ("a-random-but-short-key-0123456789", GOOD_SECRETS_KEY, "shorter than 50"),
        ("k" * 64, GOOD_SECRETS_KEY, "fewer than 5 distinct"),
        (GOOD_SECRET_KEY, "", "SECRETS_KEY is not set"),
        (GOOD_SECRET_KEY, "change-me-secrets", "SECRETS_KEY key 1 is a placeholder"),
        (GOOD_SECRET_KEY, "x" * 60, "SECRETS_KEY key 1 is not a Fernet key"),
        (GOOD_SECRET_KEY, f"{GOOD_SECRETS_KEY},short", "SECRETS_KEY key 2 is not a Fernet"),
        (GOOD_SECRET_KEY, GOOD_SECRET_KEY, "SECRETS_KEY key 1 is SECRET_KEY itself"),
    ],
)
def test_the_asgi_app_names_the_bad_key(secret_key, secrets_key, named, tmp_path):
    env = _env(SECRET_KEY=secret_key, SECRETS_KEY=secrets_key)
    result = _run(_processes(tmp_path)["asgi-import"], env)
    assert result.returncode != 0
    assert named in result.stderr


@pytest.mark.parametrize("module", ["project.asgi", "project.wsgi"])
def test_good_keys_start(module, tmp_path):
    # The control: the same command with real keys loads the app.
    env = _env(SECRET_KEY=GOOD_SECRET_KEY, SECRETS_KEY=f"{GOOD_SECRETS_KEY},{GOOD_SECRETS_KEY}")
    result = _run([sys.executable, "-c", f"import {module}; print('loaded')"], env)
    assert result.returncode == 0, result.stderr
    assert "loaded" in result.stdout


def test_secrets_key_is_never_derived_outside_the_local_settings(settings):
    from django.core.exceptions import ImproperlyConfigured

    from scheduler_app.services import secrets

    # The test settings are local: they derive one from SECRET_KEY.
    assert keys.local_secrets_key(settings.SECRET_KEY) == settings.SECRETS_KEY
    # Anywhere else an empty SECRETS_KEY is an error, never a key derived from SECRET_KEY.
    settings.SECRETS_KEY = ""
    with pytest.raises(ImproperlyConfigured):
        secrets.cipher()


# --- the system checks, at every process start (project/startup.py) ------------------------
@pytest.mark.parametrize(
    "process", ["gunicorn-wsgi", "asgi-import", "celery-worker", "celery-beat"]
)
def test_every_process_refuses_to_start_on_a_failing_system_check(process, tmp_path):
    # Good keys, but a broker visibility timeout shorter than a task (scheduler.E003): before,
    # only `manage.py` refused; gunicorn and Celery started anyway.
    env = _env(SECRET_KEY=GOOD_SECRET_KEY, SECRETS_KEY=GOOD_SECRETS_KEY)
    env["BROKER_VISIBILITY_TIMEOUT"] = "10"
    result = _run(_processes(tmp_path)[process], env)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "refusing to start, system check errors" in output
    assert "scheduler.E003" in output


def test_a_failing_check_does_not_stop_local_processes(tmp_path):
    env = _env()
    env["DJANGO_SETTINGS_MODULE"] = "project.settings"
    env["BROKER_VISIBILITY_TIMEOUT"] = "10"
    env["SCHEDULER_VAR_DIR"] = str(tmp_path)
    result = _run([sys.executable, "-c", "import project.asgi; print('loaded')"], env)
    assert result.returncode == 0, result.stderr


# --- the other credentials: .env.example's "change-me" passwords ----------------------------
def test_env_example_ships_the_placeholders_this_checks():
    assert {"POSTGRES_PASSWORD", "FLOWER_BASIC_AUTH", "GRAFANA_ADMIN_PASSWORD"} <= set(
        ENV_EXAMPLE_PLACEHOLDERS
    )


def _good_keys(**extra: str) -> dict[str, str]:
    return _env(SECRET_KEY=GOOD_SECRET_KEY, SECRETS_KEY=GOOD_SECRETS_KEY, **extra)


@pytest.mark.parametrize("name", ENV_EXAMPLE_PLACEHOLDERS)
def test_a_change_me_password_of_env_example_is_refused(name, tmp_path):
    result = _run(_processes(tmp_path)["asgi-import"], _good_keys(**{name: ENV_EXAMPLE[name]}))
    assert result.returncode != 0
    assert "refusing to start with production settings" in result.stderr
    assert f"{name} holds a placeholder credential" in result.stderr
    # The message names the variable, never its value.
    assert ENV_EXAMPLE[name] not in result.stderr


@pytest.mark.parametrize("process", ["gunicorn-wsgi", "celery-worker", "celery-flower"])
def test_env_example_as_it_is_stops_every_process(process, tmp_path):
    """`cp .env.example .env` and real keys, nothing else changed: compose's env_file hands
    each app container all of it."""
    env = {**_good_keys(), **{name: ENV_EXAMPLE[name] for name in ENV_EXAMPLE_PLACEHOLDERS}}
    result = _run(_processes(tmp_path)[process], env)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "placeholder credential" in output
    for name in ENV_EXAMPLE_PLACEHOLDERS:
        assert name in output


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DATABASE_URL", "postgres://scheduler:change-me-postgres@postgres:5432/scheduler"),
        ("REDIS_URL", "redis://:changeme@redis:6379/0"),
        ("CELERY_BROKER_URL", "sentinel://:placeholder@s1:26379/0;sentinel://:x@s2:26379/0"),
        ("METRICS_BEARER_TOKEN", "change-me-token"),
        ("METRICS_BASIC_AUTH", "prometheus:change-me"),
        ("REDIS_SENTINEL_PASSWORD", "change-me"),
    ],
)
def test_a_placeholder_in_any_credential_or_url_is_refused(name, value, tmp_path):
    result = _run(_processes(tmp_path)["asgi-import"], _good_keys(**{name: value}))
    assert result.returncode != 0
    assert f"{name} holds a placeholder credential" in result.stderr


def test_a_placeholder_in_a_mounted_secret_file_is_refused(tmp_path):
    secret = tmp_path / "postgres_password"
    secret.write_text("change-me-postgres\n")
    result = _run(
        _processes(tmp_path)["asgi-import"], _good_keys(POSTGRES_PASSWORD_FILE=str(secret))
    )
    assert result.returncode != 0
    assert "POSTGRES_PASSWORD_FILE holds a placeholder credential" in result.stderr


def test_real_passwords_start(tmp_path):
    env = _good_keys(
        POSTGRES_PASSWORD="Zq8-lN2vR6tY0pW4",
        FLOWER_BASIC_AUTH="admin:Hd3-kP9xQ1mB7sV5",
        GRAFANA_ADMIN_PASSWORD="Tg6-wE2rU8iO4pA0",
        DATABASE_URL="postgres://postgres:Zq8-lN2vR6tY0pW4@127.0.0.1:5432/postgres",
    )
    result = _run([sys.executable, "-c", "import project.asgi; print('loaded')"], env)
    assert result.returncode == 0, result.stderr
    assert "loaded" in result.stdout
