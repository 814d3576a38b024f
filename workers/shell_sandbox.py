"""The worker's shell sandbox, from settings: its mode, whether it works here, per tenant.

The one place that turns ``settings.WORKER["SHELL_SANDBOX"]`` into what the shell handler
is given, so the runner, the system check and the fleet record agree.
"""

from __future__ import annotations

import os

from django.conf import settings

from workers.handlers.sandbox import MODE_OFF, MODE_ON, SandboxStatus, sandbox_status
from workers.handlers.shell import ROOT_WORKER_RUN_AS, ShellSandbox, resolve_identity

MODES = (MODE_ON, MODE_OFF)


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
        scratch_bytes=settings.WORKER["SHELL_SCRATCH_BYTES"],
        bwrap=settings.WORKER["SHELL_BWRAP"],
    )
