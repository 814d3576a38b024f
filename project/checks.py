"""Startup checks (Django system checks) for settings that break a scheduler in production.

Stable ids, so an operator can look one up or silence it knowingly (SILENCED_SYSTEM_CHECKS):
- scheduler.E001  Redis evicts keys (maxmemory-policy is not noeviction): queued messages
                  and the leader lock can vanish under memory pressure.
- scheduler.W002  Redis could not be asked for its maxmemory-policy (only with --deploy).
- scheduler.E003  the broker's visibility timeout is shorter than the longest task timeout:
                  Redis redelivers a message whose run is still going.
- scheduler.E004  SECRET_KEY missing, a placeholder or short, with production settings.
- scheduler.E005  SECRETS_KEY (encryption key for task secrets) missing, a placeholder or
                  not Fernet keys, with production settings.
                  (The production settings already refuse to load with either, so every
                  process stops at start; these checks say the same under `manage.py check`.)
- scheduler.E006  pickle in the accepted content types: a broker message could run code.
- scheduler.E007  WEBHOOK_ALLOWED_HOSTS is set: it is no longer read (it let every tenant
                  reach the hosts it listed); each tenant's list is set by the operator.
- scheduler.W007  LIVE_LOGS_REDIS_URL is the broker's own Redis database: a tenant's output
                  then shares keys and memory with the queue (scheduler_app/live_logs.py).
- scheduler.E130  WORKER_SHELL_SANDBOX is neither "on" nor "off".
- scheduler.W131  the shell sandbox is on but bubblewrap cannot run on this host (missing, or
                  user namespaces disabled): a worker here fails every shell run with
                  error_class sandbox_unavailable.
- scheduler.W132  WORKER_SHELL_SANDBOX=off: shell tasks run unsandboxed, as the worker's user.
- scheduler.E133  WORKER_EGRESS_DENIED_NETWORKS / WORKER_EGRESS_ALLOWED_NETWORKS holds
                  something that is not an IP network: egress runs would fail to start.
"""

from __future__ import annotations

import sys
from urllib.parse import urlparse

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

from project.settings.keys import (
    DEVELOPMENT_SECRET_KEY,  # noqa: F401  (named here for readers of this module)
    secret_key_problems,
    secrets_key_problems,
)
from sandbox.egress_filter import parse_networks
from sandbox.probe import MODE_OFF, MODE_ON
from scheduler_app.limits import MAX_TIMEOUT_SECONDS
from scheduler_app.redis_client import get_redis
from workers.shell_sandbox import worker_sandbox_status

# A task may run a little past its timeout (kill grace, finishing writes) before it acks.
VISIBILITY_MARGIN_SECONDS = 60


def _redis_policy() -> str:
    config = get_redis().config_get("maxmemory-policy")
    return str(config.get("maxmemory-policy", ""))


@register(Tags.caches, deploy=False)
def check_redis_eviction(app_configs=None, **kwargs) -> list:
    if not getattr(settings, "SCHEDULER_CHECK_REDIS", True):
        return []
    try:
        policy = _redis_policy()
    except Exception as error:
        # Unreachable Redis is not a settings problem at startup (`migrate` runs before Redis
        # is up in docker compose); `check --deploy` reports it.
        if not kwargs.get("deploy", False) and not _deploying():
            return []
        return [
            Warning(
                f"could not read Redis maxmemory-policy ({type(error).__name__}: {error})",
                hint="Make sure REDIS_URL points at a reachable Redis configured with "
                "maxmemory-policy noeviction.",
                id="scheduler.W002",
            )
        ]
    return redis_policy_errors(policy)


def _deploying() -> bool:
    return "--deploy" in sys.argv


def redis_policy_errors(policy: str) -> list:
    if policy == "noeviction":
        return []
    return [
        Error(
            f"Redis maxmemory-policy is {policy!r}: under memory pressure Redis would evict "
            "queued runs and the leader lock",
            hint="Set `maxmemory-policy noeviction` (docker-compose.yml does) or "
            "`CONFIG SET maxmemory-policy noeviction`.",
            id="scheduler.E001",
        )
    ]


@register(deploy=False)
def check_visibility_timeout(app_configs=None, **kwargs) -> list:
    visibility = (getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {}).get(
        "visibility_timeout", 3600
    )
    longest = _longest_task_timeout()
    if longest is None or visibility >= longest + VISIBILITY_MARGIN_SECONDS:
        return []
    return [
        Error(
            f"broker visibility timeout ({visibility}s) is shorter than the longest task "
            f"timeout ({longest}s) plus {VISIBILITY_MARGIN_SECONDS}s: Redis would redeliver "
            "runs that are still going",
            hint="Set BROKER_VISIBILITY_TIMEOUT to at least "
            f"{longest + VISIBILITY_MARGIN_SECONDS}, or lower SCHEDULER_MAX_TASK_TIMEOUT.",
            id="scheduler.E003",
        )
    ]


def _longest_task_timeout() -> int | None:
    """The longest timeout a task may be given: SCHEDULER_MAX_TASK_TIMEOUT, else the API's cap.

    Read from settings, not from the task table: checks also run before `migrate`.
    """
    configured = getattr(settings, "SCHEDULER_MAX_TASK_TIMEOUT", None)
    if configured:
        return int(configured)

    return int(MAX_TIMEOUT_SECONDS)


@register(Tags.security, deploy=False)
def check_keys(app_configs=None, **kwargs) -> list:
    # Only the production settings insist; `make run` and the tests use the local default.
    if not getattr(settings, "SCHEDULER_PRODUCTION", False):
        return []
    problems = [
        Error(
            problem,
            hint="Set SECRET_KEY in the environment (.env) to 50+ random characters.",
            id="scheduler.E004",
        )
        for problem in secret_key_problems(settings.SECRET_KEY)
    ]
    problems += [
        Error(
            problem,
            hint="Set SECRETS_KEY in the environment (.env) to Fernet keys; keep it out of "
            "the image.",
            id="scheduler.E005",
        )
        for problem in secrets_key_problems(
            getattr(settings, "SECRETS_KEY", ""), secret_key=settings.SECRET_KEY
        )
    ]
    return problems


@register(Tags.security, deploy=False)
def check_serializers(app_configs=None, **kwargs) -> list:
    accepted = {str(c).lower() for c in getattr(settings, "CELERY_ACCEPT_CONTENT", [])}
    chosen = {
        str(getattr(settings, name, "")).lower()
        for name in ("CELERY_TASK_SERIALIZER", "CELERY_RESULT_SERIALIZER")
    }
    if not any("pickle" in c for c in accepted | chosen):
        return []
    return [
        Error(
            "pickle is an accepted Celery content type: anyone who can write to the broker "
            "could run code in the workers",
            hint="Use JSON only: CELERY_ACCEPT_CONTENT = ['json'].",
            id="scheduler.E006",
        )
    ]


@register(Tags.caches, deploy=False)
def check_live_logs_apart(app_configs=None, **kwargs) -> list:
    if not same_redis_database(settings.LIVE_LOGS_REDIS_URL, settings.REDIS_URL):
        return []
    return [
        Warning(
            "LIVE_LOGS_REDIS_URL names the broker's Redis database: live log tails share its "
            "keys and memory",
            hint="Unset LIVE_LOGS_REDIS_URL (tails then go to the next database of the same "
            "server) or point it at a Redis of its own (docker-compose.yml's redis-logs).",
            id="scheduler.W007",
        )
    ]


def same_redis_database(first: str, second: str) -> bool:
    a, b = urlparse(first), urlparse(second)
    return (a.hostname, a.port or 6379, a.path.strip("/") or "0") == (
        b.hostname,
        b.port or 6379,
        b.path.strip("/") or "0",
    )


@register(Tags.security, deploy=False)
def check_egress_networks(app_configs=None, **kwargs) -> list:
    problems = []
    for name in ("EGRESS_DENIED_NETWORKS", "EGRESS_ALLOWED_NETWORKS"):
        try:
            parse_networks(settings.WORKER[name])
        except ValueError as error:
            problems.append(
                Error(
                    f"WORKER_{name}: {error}",
                    hint="Give CIDRs (10.20.0.0/16) or addresses, comma separated.",
                    id="scheduler.E133",
                )
            )
    return problems


@register(Tags.security, deploy=False)
def check_retired_webhook_hosts(app_configs=None, **kwargs) -> list:
    hosts = getattr(settings, "RETIRED_WEBHOOK_ALLOWED_HOSTS", [])
    if not hosts:
        return []
    return [
        Error(
            f"WEBHOOK_ALLOWED_HOSTS ({', '.join(hosts)}) is no longer read: it let every "
            "tenant's http tasks reach these internal hosts",
            hint="Allow each host for the tenants that need it (`manage.py tenant_webhook_hosts "
            "<tenant> --allow <host>`, or the tenant's page in the admin), then remove the "
            "variable. The platform's alerts use NOTIFY_WEBHOOK_ALLOWED_HOSTS.",
            id="scheduler.E007",
        )
    ]


@register(Tags.security, deploy=False)
def check_shell_sandbox(app_configs=None, **kwargs) -> list:
    """Say which of on / off / unavailable a worker started here would run shell tasks with.

    A warning, not an error: the web and beat processes share these settings but run no shell
    task, and a host without bubblewrap is still a working scheduler for http/python tasks.
    """

    mode = settings.WORKER.get("SHELL_SANDBOX", MODE_ON)
    if mode not in (MODE_ON, MODE_OFF):
        return [
            Error(
                f"WORKER_SHELL_SANDBOX={mode!r} is not a known mode",
                hint='Use "on" (the default) or "off".',
                id="scheduler.E130",
            )
        ]
    status = worker_sandbox_status()
    if mode == MODE_OFF:
        return [
            Warning(
                "WORKER_SHELL_SANDBOX=off: shell tasks run unsandboxed, as the worker's user, "
                "with the worker's view of files and network",
                hint="Only for a single-user machine. Install bubblewrap and remove the "
                "setting to sandbox them.",
                id="scheduler.W132",
            )
        ]
    if not status.available:
        return [
            Warning(
                f"shell sandbox unavailable: {status.detail}",
                hint="Workers on this host fail shell runs (error_class sandbox_unavailable). "
                "Install bubblewrap and allow unprivileged user namespaces (see the manual, "
                "docs/tasks/shell-sandbox.md).",
                id="scheduler.W131",
            )
        ]
    return []
