"""Production settings: base plus what `manage.py check --deploy` asks for.

Selected with DJANGO_SETTINGS_MODULE=project.settings.production (the Dockerfile does).
Every value still comes from the environment; nothing secret has a default here. A missing,
placeholder or short SECRET_KEY or SECRETS_KEY, or a placeholder password in the environment
(.env.example's "change-me" ones), stops the import of these settings
(project/settings/keys.py), so no process of any kind (web, worker, beat, Flower, manage.py)
starts with one.
"""

from __future__ import annotations

import os

from project.settings.base import *  # noqa: F403
from project.settings.env import env_bool, env_int, env_list, env_secret
from project.settings.keys import refuse_placeholder_credentials, refuse_weak_keys

SCHEDULER_PRODUCTION = True
DEBUG = False
SECRET_KEY = env_secret("SECRET_KEY", "")
# Never derived from SECRET_KEY here (only the local settings do that): one leaked key must
# not open both the sessions and the stored secrets.
SECRETS_KEY = env_secret("SECRETS_KEY", "")
refuse_weak_keys(secret_key=SECRET_KEY, secrets_key=SECRETS_KEY)
# compose hands every app container the whole .env (env_file), Kubernetes its Secret: the
# PostgreSQL, Flower and Grafana passwords are judged where they are read, and here.
refuse_placeholder_credentials(os.environ)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [])

# Behind a TLS-terminating proxy (the usual deployment): trust its X-Forwarded-Proto.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
# /healthz, /readyz(/scheduler) and /metrics are scraped over plain HTTP inside the compose network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^readyz/scheduler$", r"^metrics$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
SECURE_CONTENT_TYPE_NOSNIFF = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
X_FRAME_OPTIONS = "DENY"

SIMPLE_JWT = {**SIMPLE_JWT, "SIGNING_KEY": SECRET_KEY}
