"""Production settings: base plus what `manage.py check --deploy` asks for.

Selected with DJANGO_SETTINGS_MODULE=project.settings.production (the Dockerfile does).
Every value still comes from the environment; nothing secret has a default here, and the
scheduler's own checks (scheduler_app/checks.py) refuse a missing SECRET_KEY or SECRETS_KEY.
"""

from __future__ import annotations

from project.settings.base import *  # noqa: F403
from project.settings.env import env_bool, env_int, env_list, env_secret

SCHEDULER_PRODUCTION = True
DEBUG = False
# A missing key becomes a marker that check scheduler.E004 names, instead of Django's bare
# ImproperlyConfigured traceback.
SECRET_KEY = env_secret("SECRET_KEY", "") or "missing"
SECRETS_KEY = env_secret("SECRETS_KEY", "")
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
