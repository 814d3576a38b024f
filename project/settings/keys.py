"""Which SECRET_KEY and SECRETS_KEY, and which passwords, a production process may start with.

Pure functions, no Django: the production settings call `refuse_weak_keys` while they are
being imported, which every process does first (gunicorn/uvicorn loading the WSGI or ASGI
app, `celery worker`, `celery beat`, `celery flower`, `manage.py`). A system check alone
ran only under `manage.py`, so the web and Celery processes started with a key anyone could
read in this repository and sign tokens with.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Mapping
from urllib.parse import urlparse

from django.core.exceptions import ImproperlyConfigured

# The local default of project/settings/base.py (project/checks.py names it too).
DEVELOPMENT_SECRET_KEY = "insecure-local-development-key-change-me-in-production"
MIN_SECRET_KEY_LENGTH = 50
# Django's own deploy check (security.W009) asks for at least this many distinct characters.
MIN_DISTINCT_CHARACTERS = 5
# Placeholders shipped in this repository or in Django's project template.
PLACEHOLDER_MARKERS = ("change-me", "changeme", "django-insecure-", "missing", "placeholder")


def _placeholder(value: str) -> bool:
    lowered = value.lower()
    return value == DEVELOPMENT_SECRET_KEY or any(m in lowered for m in PLACEHOLDER_MARKERS)


def secret_key_problems(value: str) -> list[str]:
    """Why SECRET_KEY (signs sessions, CSRF tokens and JWTs) is unfit, or []."""
    if not value:
        return ["SECRET_KEY is not set"]
    if _placeholder(value):
        return ["SECRET_KEY is a placeholder or the development default (it is public)"]
    if len(value) < MIN_SECRET_KEY_LENGTH:
        return [f"SECRET_KEY is shorter than {MIN_SECRET_KEY_LENGTH} characters"]
    if len(set(value)) < MIN_DISTINCT_CHARACTERS:
        return [f"SECRET_KEY has fewer than {MIN_DISTINCT_CHARACTERS} distinct characters"]
    return []


def _is_fernet_key(key: str) -> bool:
    try:
        return len(base64.urlsafe_b64decode(key.encode())) == 32
    except (binascii.Error, ValueError):
        return False


def secrets_key_problems(value: str, *, secret_key: str = "") -> list[str]:
    """Why SECRETS_KEY (Fernet keys that encrypt tenant secrets) is unfit, or [].

    A Fernet key is 32 random bytes in url-safe base64 (44 characters): its format, not a
    length, is what proves it is a real key; a placeholder or SECRET_KEY itself is refused.
    """
    keys = [key.strip() for key in value.split(",") if key.strip()]
    if not keys:
        return ["SECRETS_KEY is not set (it is never derived from SECRET_KEY in production)"]
    problems = []
    for position, key in enumerate(keys, start=1):
        if _placeholder(key):
            problems.append(f"SECRETS_KEY key {position} is a placeholder")
        elif secret_key and key == secret_key:
            problems.append(f"SECRETS_KEY key {position} is SECRET_KEY itself")
        elif not _is_fernet_key(key):
            problems.append(
                f"SECRETS_KEY key {position} is not a Fernet key (32 random bytes, url-safe "
                "base64, 44 characters)"
            )
    return problems


def key_problems(*, secret_key: str, secrets_key: str) -> list[str]:
    return secret_key_problems(secret_key) + secrets_key_problems(
        secrets_key, secret_key=secret_key
    )


class WeakKeysError(ImproperlyConfigured):
    """Raised while the production settings load: the process must not start."""


def refuse_weak_keys(*, secret_key: str, secrets_key: str) -> None:
    problems = key_problems(secret_key=secret_key, secrets_key=secrets_key)
    if problems:
        raise WeakKeysError(
            "refusing to start with production settings: "
            + "; ".join(problems)
            + ". Generate them with: python -c 'import secrets; print(secrets.token_urlsafe(64))'"
            " (SECRET_KEY) and python -c 'from cryptography.fernet import Fernet; "
            "print(Fernet.generate_key().decode())' (SECRETS_KEY)."
        )


# Variables that hold a credential by their name: the passwords .env.example ships as
# "change-me" (PostgreSQL, Flower, Grafana) and any other the deployment adds (a Redis
# password, a token). SECRET_KEY and SECRETS_KEY have their own, stricter checks above.
CREDENTIAL_NAME = re.compile(r"(PASSWORD|PASSWD|TOKEN|BASIC_AUTH|API_KEY|SECRET)$")
# Variables that may carry a password inside a URL (DATABASE_URL, REDIS_URL, the broker's).
URL_NAME = re.compile(r"_URL$")
OWN_CHECKS = frozenset({"SECRET_KEY", "SECRETS_KEY"})


def _url_passwords(value: str) -> list[str]:
    """The passwords of a URL, or of each part of kombu's `sentinel://a;sentinel://b` form."""
    passwords = []
    for part in value.split(";"):
        try:
            password = urlparse(part.strip()).password
        except ValueError:  # not a URL after all (a bad port): nothing to check here
            continue
        if password:
            passwords.append(password)
    return passwords


def placeholder_credentials(environ: Mapping[str, str]) -> list[str]:
    """The names (never the values) of the variables that hold a placeholder credential: a
    password, token or basic-auth pair, or a URL whose password is one."""
    found = []
    for name in sorted(environ):
        value = environ[name]
        base = name.removesuffix("_FILE")
        if not value or name in OWN_CHECKS or base in OWN_CHECKS:
            continue
        if name.endswith("_FILE") and (CREDENTIAL_NAME.search(base) or URL_NAME.search(base)):
            try:  # a mounted secret (env_secret reads NAME_FILE): judge what it holds
                with open(value, encoding="utf-8") as handle:
                    value = handle.read().strip()
            except OSError:
                continue
        if CREDENTIAL_NAME.search(base):
            if _placeholder(value):
                found.append(name)
        elif URL_NAME.search(base) and any(_placeholder(p) for p in _url_passwords(value)):
            found.append(name)
    return found


def refuse_placeholder_credentials(environ: Mapping[str, str]) -> None:
    """Raised while the production settings load, like the keys: `.env.example` copied
    without changing its "change-me" passwords must not give a running installation (its
    database, Flower, Grafana) passwords anyone can read in this repository."""
    names = placeholder_credentials(environ)
    if names:
        raise WeakKeysError(
            "refusing to start with production settings: "
            + ", ".join(names)
            + (" holds" if len(names) == 1 else " hold")
            + ' a placeholder credential (the "change-me" values of .env.example are '
            "public); set real ones, e.g. python -c 'import secrets; "
            "print(secrets.token_urlsafe(24))'."
        )


def local_secrets_key(secret_key: str) -> str:
    """The local settings' SECRETS_KEY when none is set: a Fernet key derived from SECRET_KEY,
    so a fresh checkout works. The production settings never call this."""
    return base64.urlsafe_b64encode(hashlib.sha256(secret_key.encode()).digest()).decode()
