"""All settings, read once from the environment with safe local defaults."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from project.settings.budgets import (  # noqa: F401  (settings: the budgets of tenant input)
    CHECKPOINTS,
    LOG_SEARCH,
    PAYLOADS,
    RETIRED_WEBHOOK_ALLOWED_HOSTS,
)
from project.settings.env import (
    database_from_url,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_secret,
    env_str,
)
from project.settings.keys import local_secrets_key
from project.settings.oidc import *  # noqa: F403  (single sign-on: OIDC_*)
from project.settings.oidc import OIDC_PASSWORD_AND_PROVIDER_BACKENDS
from project.settings.tracing import TRACING

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(env_str("SCHEDULER_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_secret("SECRET_KEY", "insecure-local-development-key-change-me-in-production")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])

INSTALLED_APPS = [
    # The admin, with every change it makes audited (site_admin/audited.py).
    "site_admin.admin_config.AuditedAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework_simplejwt",
    "rest_framework_simplejwt.token_blacklist",
    "axes",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "scheduler_app",
    # Ending runs across the apps; first, so the fleet's chores head the housekeeping.
    "runs",
    "dags",
    "workers",
    "alerting",
    "data_lifecycle",
    # Who a person is at the identity provider (single sign-on): identity/.
    "identity",
    "api",
    "dashboard",
    "site_admin",
    "devstack",
    # Last: what is wired across the apps once they are all loaded (project/apps.py).
    "project",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Every page, error pages included (project/csp.py says what the policy allows and why).
    "project.csp.ContentSecurityPolicyMiddleware",
    # Static files from the app server itself (compose, make run and the image alike):
    # hashed names cached for ever, gzip/brotli variants made by collectstatic.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "api.audit.AuditMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last: turns a login that django-axes marked as locked out into the 429 answer.
    "axes.middleware.AxesMiddleware",
]

CONTENT_SECURITY_POLICY = {
    "default-src": ("'self'",),
    "script-src": ("'self'",),
    "style-src": ("'self'",),
    "style-src-attr": ("'unsafe-inline'",),
    "img-src": ("'self'", "data:"),
    "font-src": ("'self'", "data:"),
    "connect-src": ("'self'",),
    "object-src": ("'none'",),
    "base-uri": ("'none'",),
    "form-action": ("'self'",),
    "frame-ancestors": ("'none'",),
}

# --- Login throttling (django-axes; api/login_throttle.py) -------------------
# The lockout check runs first; the model backend then checks the password.
# With single sign-on: passwords (superusers' only once OIDC_LOCAL_LOGIN is off), then the
# provider's login (project/settings/oidc.py).
AUTHENTICATION_BACKENDS = [
    "api.login_throttle.LoginThrottleBackend",
    *OIDC_PASSWORD_AND_PROVIDER_BACKENDS,
]
# After this many failed logins in a row for one user name from one client address (the
# pair, never the address alone), that pair's logins (the right password too) are refused
# for LOGIN_LOCKOUT_SECONDS; each further lockout of the pair lasts twice as long, up to
# LOGIN_LOCKOUT_MAX_SECONDS, and a pair is forgotten after a success or that long without a
# failure (api/login_throttle.py).
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(seconds=env_int("LOGIN_LOCKOUT_SECONDS", 900))
LOGIN_LOCKOUT_MAX_SECONDS = env_int("LOGIN_LOCKOUT_MAX_SECONDS", 86400)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_HANDLER = "api.login_throttle.PairLockoutHandler"
# A refused attempt during a lockout is not counted (nor does it extend the lockout); the
# lockouts themselves grow.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "api.login_throttle.lockout_response"
AXES_CLIENT_IP_CALLABLE = "api.login_throttle.client_ip"
# How many reverse proxies in front append to X-Forwarded-For (0: trust REMOTE_ADDR only).
# Exactly as many as there are: one too many lets a client choose its address (and so a
# fresh pair per guess). The Kubernetes manifests set 1 (the ingress), compose 0.
LOGIN_TRUSTED_PROXIES = env_int("LOGIN_TRUSTED_PROXIES", 0)
AXES_VERBOSE = False
# Failures are what is counted (AccessAttempt rows, dropped after the cool-off); a row per
# successful login would grow a table without bound (the audit log records the lockouts).
AXES_DISABLE_ACCESS_LOG = True

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

# A local PostgreSQL by default. `make run` (manage.py runstack) without DATABASE_URL starts
# an embedded PostgreSQL under var/ and hands its URL to every process it starts.
DATABASES = {
    "default": database_from_url(
        env_secret("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/scheduler")
    )
}
# Workers and beats keep their connection; the ASGI web tier sets 0 (project/asgi.py).
DATABASES["default"]["CONN_MAX_AGE"] = env_int("DATABASE_CONN_MAX_AGE", 60)
# The standby's settings: the replica for lists, the router, retries, the backup binaries.
from project.settings.database_recovery import *  # noqa: E402, F403
from project.settings.database_recovery import replica_databases  # noqa: E402

DATABASES.update(replica_databases(conn_max_age=DATABASES["default"]["CONN_MAX_AGE"]))
# Behind PgBouncer in transaction pooling mode a client's transactions may each run on a
# different server connection, so nothing may outlive a transaction on one: no server-side
# cursors (Django's .iterator() opens them WITH HOLD outside a transaction), no prepared
# statements (scheduler_app.db_rows). Nothing here holds session state otherwise: the leader
# lock lives in Redis, not in an advisory lock, and SET is only ever SET LOCAL.
DATABASE_TRANSACTION_POOLING = env_bool("DATABASE_TRANSACTION_POOLING", False)
DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = DATABASE_TRANSACTION_POOLING
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Every password a person sets through the API, the dashboard or the admin goes through these.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": env_int("PASSWORD_MIN_LENGTH", 12)},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
# `collectstatic` writes here: the Dockerfile at build time, `make run` before it starts web.
STATIC_ROOT = VAR_DIR / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

LOGIN_URL = "/dashboard/login/"
LOGIN_REDIRECT_URL = "/dashboard/"

# Bodies over 1 MiB are refused before any parsing.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("MAX_REQUEST_BODY_BYTES", 1024 * 1024)
# JSON bodies nested deeper than this are a 400 (api/parsers.py).
API_MAX_JSON_DEPTH = env_int("API_MAX_JSON_DEPTH", 64)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # First: it takes only bearer tokens whose `iss` is OIDC_ISSUER (and nothing at all
        # without one), leaving every other bearer token to simplejwt (api/oidc_auth.py).
        "api.oidc_auth.ProviderTokenAuthentication",
        "rest_framework_simplejwt.authentication.JWTAuthentication",
        "api.api_keys.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # One permission class for every view: tenant membership + the view's `write_role`.
    "DEFAULT_PERMISSION_CLASSES": ["api.permissions.TenantRolePermission"],
    "DEFAULT_THROTTLE_CLASSES": ["api.throttling.TenantRateThrottle"],
    "DEFAULT_SCHEMA_CLASS": "api.schema.SchedulerAutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["api.parsers.BoundedJSONParser"],
    "EXCEPTION_HANDLER": "api.errors.api_exception_handler",
    "DEFAULT_PAGINATION_CLASS": "api.pagination.PagePagination",
    "PAGE_SIZE": 50,
    # `?format=text` on the logs endpoint is ours, not a renderer switch.
    "URL_FORMAT_OVERRIDE": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Distributed task scheduler API",
    "DESCRIPTION": "Tenant-scoped tasks, executions, DAGs and administration.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Request bodies refuse unknown keys; the schema says so (additionalProperties: false).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "api.schema.strict_request_bodies",
    ],
    "SCHEMA_PATH_PREFIX": "/api/v1",
    # Several models have a `status` field with different choices: name each enum.
    "ENUM_NAME_OVERRIDES": {
        "ExecutionStatusEnum": "scheduler_app.choices.ExecutionStatus",
        "DagRunStatusEnum": "dags.choices.RunStatus",
        "DagNodeStatusEnum": "dags.choices.NodeStatus",
    },
}

# --- API access, quotas, fairness and secrets ---------------------------------
# Fernet keys, comma separated: the first encrypts, all decrypt (rotation: put the new key
# first, run `manage.py rotate_secrets`, then drop the old one). Locally, and only here, the
# default is derived from SECRET_KEY; the production settings refuse to start without one.
SECRETS_KEY = env_secret("SECRETS_KEY", "") or local_secrets_key(SECRET_KEY)
API_RATE_LIMIT_DEFAULT = env_int("API_RATE_LIMIT_PER_MINUTE", 1000)
# A member invitation's token works once, for this long (scheduler_app/services/invitations.py).
MEMBER_INVITATION_TTL_HOURS = env_int("MEMBER_INVITATION_TTL_HOURS", 168)
IDEMPOTENCY_TTL_HOURS = env_int("IDEMPOTENCY_TTL_HOURS", 24)
# Posted events (POST /api/v1/events) are kept this long, then pruned by the leader.
EVENTS_RETENTION_DAYS = env_int("EVENTS_RETENTION_DAYS", 7)
# Quota deferrals and flow-control rechecks: project/settings/run_waits.py.
from project.settings.run_waits import *  # noqa: E402, F403

# A worker reads a tenant's stored-log bytes (scheduler_app/services/log_quota.py) at most
# this often; a burst of finishes can overshoot max_log_bytes by what it logs meanwhile.
LOG_QUOTA_CACHE_SECONDS = env_float("LOG_QUOTA_CACHE_SECONDS", 2.0)
# Fair dispatch (scheduler_app/ringing/fairness.py): the doorbells one tenant may have waiting in
# one tier's broker queue; the rest wait in PostgreSQL as pending rows and are promoted as the
# tenant's runs start. The cap follows the fleet's measured drain rate, so that all busy tenants
# together keep about FAIR_QUEUE_SECONDS of work queued (another tenant's run starts within about
# that long), and never falls below FAIR_INFLIGHT_PER_TENANT (0 = no fairness), nor, while the tier
# drains nothing, below one round of the live fleet for what the leader rings in batches.
FAIR_INFLIGHT_PER_TENANT = env_int("FAIR_INFLIGHT_PER_TENANT", 100)
FAIR_QUEUE_SECONDS = env_float("FAIR_QUEUE_SECONDS", 1.0)
FAIR_INFLIGHT_STALE_SECONDS = env_float("FAIR_INFLIGHT_STALE_SECONDS", 120.0)

SIMPLE_JWT = {
    "ACCESS_TOKEN_LIFETIME": timedelta(minutes=env_int("JWT_ACCESS_MINUTES", 30)),
    "REFRESH_TOKEN_LIFETIME": timedelta(days=env_int("JWT_REFRESH_DAYS", 1)),
    "SIGNING_KEY": SECRET_KEY,
    # A refresh hands out a new refresh token and blacklists the used one (a stolen token
    # works once, and its theft shows when the owner's next refresh is refused).
    "ROTATE_REFRESH_TOKENS": True,
    "BLACKLIST_AFTER_ROTATION": True,
    # Tokens carry a hash of the password hash: a password change revokes them all.
    "CHECK_REVOKE_TOKEN": True,
}

# --- Redis and Celery: project/settings/redis_celery.py ---------------------------
from project.settings.redis_celery import *  # noqa: E402, F403

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
    # A fire whose overlap policy is `allow` is recorded and rung this long before it falls
    # due; the worker that claims it starts the handler at the fire's time. A burst of
    # fires due in the same second is claimed before that second instead of after it.
    # 0 records every fire when it falls due. Under 10 s (a claim's clock tolerance).
    "FIRE_AHEAD_SECONDS": env_float("SCHEDULER_FIRE_AHEAD_SECONDS", 0.5),
    # Above FIRE_AHEAD_SECONDS: a burst that takes the leader longer than that to ring
    # (50,000 fires due together) rings earlier, as early as it needs by the leader's
    # measured ring rate, up to this long before it falls due (beat.lead).
    # A worker process may hold a burst's batch that long before its time, idle. Under 10 s
    # (a claim's clock tolerance); 0 or at most FIRE_AHEAD_SECONDS: the lead never grows.
    "FIRE_AHEAD_MAX_SECONDS": env_float("SCHEDULER_FIRE_AHEAD_MAX_SECONDS", 8.0),
    # Fires of one tenant and tier due together ring up to this many per broker message
    # (workers.runner, workers.batch), a burst cut into one message per live worker process, or 16
    # when the fleet is unknown (dispatch.batch_size); 1 rings one message per fire.
    "DOORBELL_BATCH": env_int("SCHEDULER_DOORBELL_BATCH", 128),
    "CATCHUP_WINDOW_SECONDS": env_int("SCHEDULER_CATCHUP_WINDOW", 300),
    # Queued executions nobody started after this long are published again.
    "REQUEUE_GRACE_SECONDS": env_int("SCHEDULER_REQUEUE_GRACE", 300),
    "HOUSEKEEPING_SECONDS": env_float("SCHEDULER_HOUSEKEEPING_SECONDS", 2.0),
    # A run whose handler type no live worker offers (a container run with no worker that
    # has a runtime) waits this long after its time, then fails with `no_capable_worker`.
    "CAPABILITY_WAIT_SECONDS": env_float("SCHEDULER_CAPABILITY_WAIT_SECONDS", 600.0),
    # Split the schedules over this many leader locks (beat/shards.py): each
    # beat keeps every shard warm and leads its fair share; 1 = one leader for all.
    "SHARDS": env_int("SCHEDULER_SHARDS", 1),
}

WORKER = {
    "LEASE_SECONDS": env_int("WORKER_LEASE_SECONDS", 60),
    "KILL_GRACE_SECONDS": env_float("WORKER_KILL_GRACE_SECONDS", 5.0),
    "LOG_MAX_BYTES": env_int("WORKER_LOG_MAX_BYTES", 10 * 1024 * 1024),
    "CONTAINER_RUNTIME": env_str("CONTAINER_RUNTIME", "") or None,
    # A batch doorbell hands back the runs it has not started once no run has started for
    # this long (one handler, or every lane, held that long), or the batch has run four
    # times this long (they are rung again, one each), so a slow handler never holds the
    # others back.
    "BATCH_SPILL_SECONDS": env_float("WORKER_BATCH_SPILL_SECONDS", 0.25),
    # A batch whose runs all only wait (shell: on their sandbox; http: on the network) runs
    # up to this many at once in each worker process (workers/batch_lanes.py); other batches
    # run one by one. Default: two per CPU, enough to keep the CPUs busy while bwrap sleeps.
    "BATCH_PARALLEL": env_int("WORKER_BATCH_PARALLEL", 2 * (os.cpu_count() or 1)),
    # Shell tasks run in a bubblewrap sandbox ("on"). "off" runs them as plain processes of
    # the worker's user, able to read what the worker can: only for a single-user machine.
    # Where bubblewrap cannot run, "on" refuses shell runs (error_class sandbox_unavailable).
    "SHELL_SANDBOX": env_str("WORKER_SHELL_SANDBOX", "on").strip().lower(),
    # The bubblewrap executable: a name looked up in the system directories, or a path.
    "SHELL_BWRAP": env_str("WORKER_SHELL_BWRAP", "bwrap"),
    # Size cap of each of a sandbox's in-memory scratch directories (/task and /tmp).
    "SHELL_SCRATCH_BYTES": env_int("WORKER_SHELL_SCRATCH_BYTES", 1024**3),
    # Whether this worker runs shell tasks with `"network": "egress"` (their own queues,
    # `<tier>.egress`, scheduler_app/capabilities.py). Kubernetes turns it off on the workers
    # that sit next to the data and runs them on the worker-egress pool alone.
    "SHELL_EGRESS": env_bool("WORKER_SHELL_EGRESS", True),
    # Shell runs with `"network": "egress"` reach the public internet only: private,
    # link-local and metadata ranges, the worker's own addresses and the platform's Redis
    # and PostgreSQL are unreachable in their sandbox (sandbox/egress_filter.py).
    # More networks to refuse, and private ones to open (CIDRs, comma separated; the
    # worker's and the platform's addresses stay refused inside an opened one).
    "EGRESS_DENIED_NETWORKS": env_list("WORKER_EGRESS_DENIED_NETWORKS", []),
    "EGRESS_ALLOWED_NETWORKS": env_list("WORKER_EGRESS_ALLOWED_NETWORKS", []),
}
# `celery` handlers may send only these task names and queues, as "task" or "task@queue"
# (empty: the celery handler can send nothing). The platform's own task names and tier
# queues are refused even when listed: a tenant must not ring the platform's own workers.
CELERY_HANDLER_TASKS = env_list("CELERY_HANDLER_TASKS", [])

# --- Observability: /metrics, /readyz, dashboard, alerts and notifications -----
MONITORING = {
    # /metrics needs one of these (or a signed-in staff session); empty means not configured.
    "METRICS_BEARER_TOKEN": env_str("METRICS_BEARER_TOKEN", ""),
    "METRICS_BASIC_AUTH": env_str("METRICS_BASIC_AUTH", ""),  # "user:password"
    # A scheduler status older than this does not count as a live leader.
    "LEADER_FRESH_SECONDS": env_float("MONITORING_LEADER_FRESH_SECONDS", 15.0),
    # A fire that has not started this long after its time counts as missed.
    "MISSED_GRACE_SECONDS": env_float("MONITORING_MISSED_GRACE_SECONDS", 60.0),
    "FLOWER_URL": env_str("FLOWER_URL", "http://127.0.0.1:5555/"),
    "DASHBOARD_POLL_SECONDS": env_float("DASHBOARD_POLL_SECONDS", 3.0),
}
ALERTS = {
    "EVALUATE_SECONDS": env_float("ALERTS_EVALUATE_SECONDS", 30.0),
    "ERROR_RATE_THRESHOLD": env_float("ALERTS_ERROR_RATE", 0.05),
    "SUCCESS_RATE_THRESHOLD": env_float("ALERTS_SUCCESS_RATE", 0.95),
    "MIN_RUNS_FOR_RATE": env_int("ALERTS_MIN_RUNS", 20),
    "QUEUE_DEPTH_THRESHOLD": env_int("ALERTS_QUEUE_DEPTH", 10000),
    # An open incident nobody acknowledged is announced again this often (0: only once).
    "RENOTIFY_SECONDS": env_int("ALERTS_RENOTIFY_SECONDS", 3600),
    # Operators' channels for system-wide alerts (queue depth, dead workers).
    "OPS_WEBHOOK_URL": env_str("ALERTS_OPS_WEBHOOK_URL", ""),
    "OPS_EMAILS": env_list("ALERTS_OPS_EMAILS", []),
    # Hosts the platform's own alerts (OPS_WEBHOOK_URL) may reach although they resolve to
    # private addresses. Tenants' channels never use this list: each tenant has its own,
    # set by the operator (Tenant.webhook_allowed_hosts).
    "WEBHOOK_ALLOWED_HOSTS": env_list("NOTIFY_WEBHOOK_ALLOWED_HOSTS", []),
    "WEBHOOK_TIMEOUT_SECONDS": env_float("NOTIFY_WEBHOOK_TIMEOUT", 10.0),
    # Where Slack bot tokens post (chat.postMessage) and PagerDuty events go.
    "SLACK_API_URL": env_str("NOTIFY_SLACK_API_URL", "https://slack.com/api"),
    "PAGERDUTY_EVENTS_URL": env_str(
        "NOTIFY_PAGERDUTY_EVENTS_URL", "https://events.pagerduty.com/v2/enqueue"
    ),
    "QUEUE": env_str("NOTIFY_QUEUE", "critical"),
    "FROM_EMAIL": env_str("NOTIFY_FROM_EMAIL", "scheduler@localhost"),
    # A tenant's mail (alerting/services/mail_budget.py): addresses per email channel, and
    # per task in its email:// targets (400 past it); messages (one per recipient) its
    # notifications mail per rolling hour (more are dropped, with an audit entry and a
    # metric; a channel test answers 429); the domains it may mail (empty: any).
    "EMAIL_MAX_RECIPIENTS": env_int("NOTIFY_EMAIL_MAX_RECIPIENTS", 10),
    "EMAIL_PER_TENANT_PER_HOUR": env_int("NOTIFY_EMAIL_PER_TENANT_PER_HOUR", 100),
    "EMAIL_ALLOWED_DOMAINS": env_list("NOTIFY_EMAIL_ALLOWED_DOMAINS", []),
    "BASE_URL": env_str("DASHBOARD_BASE_URL", "http://127.0.0.1:8000"),
    # How the worker tiers scale, said in the "worker pool saturated" alert
    # (alerting/autoscaling.py): kubernetes, keda, none, or auto (KEDA's ScaledObjects when
    # running in a cluster, else none).
    "AUTOSCALING": env_str("ALERTS_AUTOSCALING", "auto"),
    # A leadership change this recent is the "leader failover" alert (alerting/failover.py).
    "LEADER_FAILOVER_WINDOW_SECONDS": env_int("ALERTS_LEADER_FAILOVER_WINDOW_SECONDS", 600),
    # "Workers rising": a tier worker that joined the fleet this recently (the trend window).
    "FLEET_TREND_SECONDS": env_int("ALERTS_FLEET_TREND_SECONDS", 300),
}
# Where the built manual is served (`make docs` builds it into build/manual): the base of
# every alert's runbook link (alerting/runbooks.py). Unset, the links point at the local
# build (file://); production warns (scheduler.W140).
MANUAL_BASE_URL = env_str("MANUAL_BASE_URL", "")
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
# Seconds an SMTP exchange may take (an invitation is mailed while its request waits).
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10)
# --- Data lifecycle: partitions, retention, archive, statistics ----------------------------
# The longest timeout a task on this installation gets (the API refuses longer ones); the
# broker's visibility timeout must exceed it (system check scheduler.E003), or Redis
# redelivers runs that are still going. Lost runs do not wait for that redelivery: the
# fleet's reaper and the leader's requeue recover them within seconds to minutes.
SCHEDULER_MAX_TASK_TIMEOUT = env_int("SCHEDULER_MAX_TASK_TIMEOUT", 7000)
# Set to false to skip the Redis maxmemory-policy startup check (scheduler.E001).
SCHEDULER_CHECK_REDIS = env_bool("SCHEDULER_CHECK_REDIS", True)
LIFECYCLE = {
    # Monthly partitions kept ready beyond the current month (PostgreSQL).
    "PARTITION_MONTHS_AHEAD": env_int("PARTITION_MONTHS_AHEAD", 2),
    "PARTITION_CHECK_SECONDS": env_float("PARTITION_CHECK_SECONDS", 3600.0),
    # Where archives go: a directory, or s3://bucket/prefix (needs boto3; endpoint for MinIO).
    "ARCHIVE_URL": env_str("ARCHIVE_URL", str(VAR_DIR / "archive")),
    "ARCHIVE_S3_ENDPOINT_URL": env_str("ARCHIVE_S3_ENDPOINT_URL", "") or None,
    "ARCHIVE_BATCH_ROWS": env_int("ARCHIVE_BATCH_ROWS", 10000),
    # How often the leader asks a bulk worker to apply retention (seconds; 0 = never).
    "RETENTION_RUN_SECONDS": env_float("RETENTION_RUN_SECONDS", 3600.0),
    # How often the leader asks a bulk worker to refresh per-task statistics.
    "STATS_REFRESH_SECONDS": env_float("STATS_REFRESH_SECONDS", 60.0),
    # Buckets this far back are recomputed on each refresh (runs finish after they start).
    "STATS_LOOKBACK_HOURS": env_int("STATS_LOOKBACK_HOURS", 6),
}
# --- DAGs: project/settings/dags.py -------------------------------------------
from project.settings.dags import *  # noqa: E402, F403

# --- Worker fleet and live log streams: project/settings/fleet.py -----------------
from project.settings.fleet import *  # noqa: E402, F403

# Modules whose @handler("name") functions python tasks may call. The demo handlers, and
# the design document's DocumentClassifier, InvoiceProcessor and ReceiptProcessor.
PYTHON_HANDLER_MODULES = env_list(
    "PYTHON_HANDLER_MODULES", ["workers.handlers.builtin", "workers.handlers.documents"]
)

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
if TRACING["ENDPOINT"]:
    # Each line names the trace and span it was written in, to find it from the trace UI.
    LOGGING["filters"] = {"trace_ids": {"()": "tracing.logs.TraceIdsFilter"}}
    LOGGING["handlers"]["console"]["filters"] = ["trace_ids"]
    LOGGING["formatters"]["plain"]["format"] = (
        "%(asctime)s %(levelname)s %(name)s [trace=%(trace_id)s span=%(span_id)s] %(message)s"
    )
    # `celery worker` and `celery beat` set their own handlers up (Celery's formats, with the
    # ids); project.tracing_boot gives each of them the filter.
    CELERY_WORKER_LOG_FORMAT = (
        "[%(asctime)s: %(levelname)s/%(processName)s] [trace=%(trace_id)s span=%(span_id)s]"
        " %(message)s"
    )
    CELERY_WORKER_TASK_LOG_FORMAT = (
        "[%(asctime)s: %(levelname)s/%(processName)s] [trace=%(trace_id)s span=%(span_id)s]"
        " %(task_name)s[%(task_id)s]: %(message)s"
    )
