"""Shell handler: run one argv in a bubblewrap sandbox (or, if the operator says so, without).

Design notes:

* The command is an argv list and is never given to a shell; a task that wants shell syntax
  has to say ``["sh", "-c", ...]`` itself, so the choice is visible in its config.
* The child gets a clean environment: the configured variables, a minimal ``PATH`` and the
  ``TASK_*`` variables (``shell_environment.py``). Nothing leaks from the worker's own
  environment (credentials!).
* Sandboxed (the default, ``shell_sandboxed.py``; the package ``sandbox`` has the profile):
  the command sees its own namespaces, a read-only system, an empty private ``/task`` work
  directory and ``/tmp`` in memory, and no network. It is started by a chain of small
  programs without a pre-exec hook (``sandbox.spawn``), so starting it costs what bwrap
  costs. Timeout and cancel end the whole sandbox at once (its pid namespace dies with
  bwrap); nothing is left to remove afterwards.
* Unsandboxed (``WORKER_SHELL_SANDBOX=off``, and the container runtime's CLI,
  ``shell_unsandboxed.py``): the old path, a fresh directory under the temp dir
  (``shell_workdirs.py``), ``start_new_session=True`` so one ``killpg`` reaches the tree, and
  a pre-exec hook for the rlimits and ``PR_SET_PDEATHSIG`` (``sandbox.preexec``).
* Both are watched by one supervisor loop (``shell_supervisor.py``) on non-blocking pipes and
  a pidfd; lines go to the log through ``shell_lines.LineSplitter``.

This module checks the config and the tenant's rights, resolves the limits and the user, and
picks the path.
"""

from __future__ import annotations

import os
from typing import Any

from handler_contract.base import STATUS_CANCELLED, HandlerContext, HandlerOutcome, mask_outcome
from handler_contract.validation import rlimit_requirements
from sandbox.identity import ROOT_WORKER_RUN_AS, resolve_identity
from sandbox.options import ShellSandbox
from sandbox.probe import MODE_OFF, MODE_ON, probe_bubblewrap
from sandbox.profile import NETWORK_EGRESS, NETWORK_MODES, NETWORK_NONE
from sandbox.rlimits import resolve_limits

from .shell_outcomes import spawn_failure
from .shell_sandboxed import run_sandboxed
from .shell_unsandboxed import run_unsandboxed


def run_shell(
    config: dict[str, Any],
    ctx: HandlerContext,
    *,
    kill_grace_seconds: float = 5.0,
    run_as: str | None = None,
    sandbox: ShellSandbox | None = None,
) -> HandlerOutcome:
    """Run ``config["command"]`` (an argv list) once and report how it ended."""
    sandbox = sandbox or ShellSandbox()
    if ctx.cancel_event.is_set():
        return HandlerOutcome(
            status=STATUS_CANCELLED,
            error_class="cancelled",
            error_message="cancelled before start",
            transient=False,
        )
    command = config.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
        return spawn_failure(
            "invalid_config", "handler.command must be a non-empty list of strings"
        )
    network = config.get("network", NETWORK_NONE)
    if network not in NETWORK_MODES:
        return spawn_failure("invalid_config", f"handler.network must be one of {NETWORK_MODES}")
    if network == NETWORK_EGRESS and not sandbox.egress_allowed:
        return spawn_failure(
            "egress_not_allowed",
            'handler.network: "egress" is not allowed for this tenant (ask the operator)',
        )
    if network == NETWORK_EGRESS and not sandbox.egress_offered:
        # Only a run that reached this worker by another way than its queue (its routing
        # sends it to `<tier>.egress`) gets here: it does not run next to the platform.
        return spawn_failure(
            "egress_unavailable",
            "this worker does not run egress-enabled tasks (WORKER_SHELL_EGRESS=off); they "
            "run on the workers that consume the egress queues",
        )
    try:
        limits = resolve_limits(rlimit_requirements(config.get("resource_requirements")))
    except (ValueError, TypeError) as exc:
        return spawn_failure("invalid_config", f"handler.resource_requirements: {exc}")
    if run_as is None and sandbox.mode == MODE_ON and os.geteuid() == 0:
        run_as = ROOT_WORKER_RUN_AS  # tenant code never starts from uid 0
    try:
        identity = resolve_identity(run_as)
    except KeyError:
        return spawn_failure(
            "invalid_config", f"run-as user {run_as!r} does not exist on this worker"
        )
    kill_grace_seconds = max(0.0, kill_grace_seconds)
    if sandbox.mode == MODE_OFF:
        outcome = run_unsandboxed(list(command), config, ctx, limits, kill_grace_seconds, identity)
    else:
        status = probe_bubblewrap(identity, sandbox.bwrap)
        if not status.available:
            return spawn_failure(
                "sandbox_unavailable",
                f"shell tasks need the sandbox and this worker cannot provide it: "
                f"{status.detail} (the operator may set WORKER_SHELL_SANDBOX=off on a "
                "single-user machine)",
            )
        outcome = run_sandboxed(
            list(command), network, ctx, sandbox, limits, kill_grace_seconds, identity, config
        )
    return mask_outcome(outcome, ctx.secrets_to_mask)
