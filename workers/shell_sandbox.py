"""The worker's shell sandbox, from settings: its mode, whether it works here, per tenant.

The one place that turns ``settings.WORKER["SHELL_SANDBOX"]`` (and the egress policy) into
what the shell handler is given, so the runner, the system check and the fleet record agree.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from urllib.parse import urlparse

from django.conf import settings

from sandbox.egress_filter import EgressPolicy
from sandbox.identity import ROOT_WORKER_RUN_AS, resolve_identity
from sandbox.options import ShellSandbox
from sandbox.probe import MODE_ON, MODES, SandboxStatus, sandbox_status

logger = logging.getLogger(__name__)

# The platform's hosts are resolved again after this long.
PLATFORM_ADDRESSES_SECONDS = 60.0


def configured_mode() -> str:
    mode = settings.WORKER["SHELL_SANDBOX"]
    if mode not in MODES:
        # A typo must not turn the sandbox off; the system check names the bad value.
        return MODE_ON
    return mode


def worker_run_as() -> str | None:
    run_as = settings.FLEET["SHELL_RUN_AS_USER"] or None
    if run_as is None and configured_mode() == MODE_ON and os.geteuid() == 0:
        return ROOT_WORKER_RUN_AS
    return run_as


def worker_sandbox_status() -> SandboxStatus:
    """Whether this process can run shell tasks, and how (probes bwrap once per process)."""
    try:
        identity = resolve_identity(worker_run_as())
    except KeyError:
        identity = None
    return sandbox_status(configured_mode(), identity, settings.WORKER["SHELL_BWRAP"])


def shell_sandbox_for(*, egress_allowed: bool) -> ShellSandbox:
    return ShellSandbox(
        mode=configured_mode(),
        egress_allowed=egress_allowed,
        egress_offered=settings.WORKER["SHELL_EGRESS"],
        egress_policy=egress_policy() if egress_allowed else EgressPolicy(),
        scratch_bytes=settings.WORKER["SHELL_SCRATCH_BYTES"],
        bwrap=settings.WORKER["SHELL_BWRAP"],
    )


def egress_policy() -> EgressPolicy:
    """What egress runs may not reach beyond the built-in list (the platform's own Redis and
    PostgreSQL, by address, and the operator's networks), and what the operator opens."""
    return EgressPolicy(
        denied=(*platform_addresses(), *settings.WORKER["EGRESS_DENIED_NETWORKS"]),
        allowed=tuple(settings.WORKER["EGRESS_ALLOWED_NETWORKS"]),
    )


def _platform_hosts() -> set[str]:
    hosts = {str(settings.DATABASES["default"].get("HOST") or "")}
    urls = [
        settings.REDIS_URL,
        settings.LIVE_LOGS_REDIS_URL,
        settings.CELERY_BROKER_URL,
        settings.CELERY_RESULT_BACKEND,
    ]
    for url in urls:
        for part in str(url or "").split(";"):
            hosts.add(urlparse(part.strip()).hostname or "")
    hosts |= {sentinel.rsplit(":", 1)[0] for sentinel in settings.REDIS_SENTINELS}
    # A socket path is no address (and the sandbox sees no file of the worker's).
    return {host.strip("[]") for host in hosts if host and not host.startswith("/")}


_resolved: tuple[float, tuple[str, ...]] = (0.0, ())


def platform_addresses() -> tuple[str, ...]:
    """The addresses the platform's Redis and PostgreSQL hosts resolve to now (read again
    after PLATFORM_ADDRESSES_SECONDS: a failover may move them)."""
    global _resolved
    resolved_at, addresses = _resolved
    if time.monotonic() - resolved_at < PLATFORM_ADDRESSES_SECONDS:
        return addresses
    found: set[str] = set()
    for host in _platform_hosts():
        try:
            found |= {info[4][0] for info in socket.getaddrinfo(host, None)}
        except OSError:
            # Not resolvable from here now: the private ranges still hold for it.
            logger.warning("egress filter: could not resolve the platform's host %r", host)
    _resolved = (time.monotonic(), tuple(sorted(found)))
    return _resolved[1]
