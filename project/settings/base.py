"""All settings, read once from the environment with safe local defaults."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from project.settings.env import (
    database_from_url,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(env_str("SCHEDULER_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY", "insecure-local-development-key-change-me-in-production")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework_simplejwt",
    "scheduler_app",
    "dags",
    "workers",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"
WSGI_APPLICATION = "project.wsgi.application"
ASGI_APPLICATION = "project.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {
    "default": database_from_url(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'scheduler.sqlite3'}"), base_dir=BASE_DIR
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

LOGIN_URL = "/admin/login/"

# Bodies over 1 MiB are refused before any parsing.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("MAX_REQUEST_BODY_BYTES", 1024 * 1024)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework_simplejwt.authentication.JWTAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "scheduler_app.api.errors.api_exception_handler",
    "DEFAULT_PAGINATION_CLASS": "scheduler_app.api.pagination.PagePagination",
    "PAGE_SIZE": 50,
    # `?format=text` on the logs endpoint is ours, not a renderer switch.
    "URL_FORMAT_OVERRIDE": None,
}

SIMPLE_JWT = {
    "ACCESS_TOKEN_LIFETIME": timedelta(minutes=env_int("JWT_ACCESS_MINUTES", 30)),
    "REFRESH_TOKEN_LIFETIME": timedelta(days=env_int("JWT_REFRESH_DAYS", 7)),
    "SIGNING_KEY": SECRET_KEY,
}

# --- Redis and Celery -------------------------------------------------------
REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")

CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = None  # results live in PostgreSQL, not in the broker
CELERY_TASK_IGNORE_RESULT = True
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TIMEZONE = "UTC"
CELERY_ENABLE_UTC = True
# Late ack: a message a dead worker had taken comes back; the claim makes it once per attempt.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "normal"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int("BROKER_VISIBILITY_TIMEOUT", 3600),
    "global_keyprefix": env_str("BROKER_KEY_PREFIX", ""),
}
CELERY_WORKER_SEND_TASK_EVENTS = env_bool("CELERY_SEND_EVENTS", True)
CELERY_TASK_SEND_SENT_EVENT = False
CELERY_BEAT_SCHEDULER = "scheduler_app.beat:LeaderScheduler"
CELERY_BEAT_MAX_LOOP_INTERVAL = 1

# --- Scheduler --------------------------------------------------------------
SCHEDULER = {
    # Prefix for every key this project keeps in Redis (tests give each run its own).
    "REDIS_KEY_PREFIX": env_str("SCHEDULER_REDIS_PREFIX", "sched:"),
    # Failover: a SIGKILLed leader's lock expires after the TTL (renewed every TTL/3,
    # trusted for 80% of it) and a standby tries every LOCK_TRY: takeover <= TTL + try.
    "LOCK_TTL_SECONDS": env_float("SCHEDULER_LOCK_TTL", 1.5),
    "LOCK_TRY_SECONDS": env_float("SCHEDULER_LOCK_TRY_SECONDS", 0.25),
    "TICK_SECONDS": env_float("SCHEDULER_TICK_SECONDS", 0.5),
    "FIRE_BATCH_SIZE": env_int("SCHEDULER_FIRE_BATCH", 1000),
    "CATCHUP_WINDOW_SECONDS": env_int("SCHEDULER_CATCHUP_WINDOW", 300),
    # Queued executions nobody started after this long are published again.
    "REQUEUE_GRACE_SECONDS": env_int("SCHEDULER_REQUEUE_GRACE", 300),
    "HOUSEKEEPING_SECONDS": env_float("SCHEDULER_HOUSEKEEPING_SECONDS", 2.0),
}

WORKER = {
    "LEASE_SECONDS": env_int("WORKER_LEASE_SECONDS", 60),
    "KILL_GRACE_SECONDS": env_float("WORKER_KILL_GRACE_SECONDS", 5.0),
    "LOG_MAX_BYTES": env_int("WORKER_LOG_MAX_BYTES", 10 * 1024 * 1024),
    # Hosts a webhook may reach even though they resolve to a private/loopback address.
    "HTTP_ALLOWED_HOSTS": env_list("WEBHOOK_ALLOWED_HOSTS", []),
    "CONTAINER_RUNTIME": env_str("CONTAINER_RUNTIME", "") or None,
}

# Modules whose @handler("name") functions python tasks may call.
PYTHON_HANDLER_MODULES = env_list("PYTHON_HANDLER_MODULES", ["workers.handlers.builtin"])

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    # The real stderr: Celery swaps sys.stderr for a logging proxy, and a handler that
    # writes into that proxy would swallow every line.
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "stream": "ext://sys.__stderr__",
        }
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
