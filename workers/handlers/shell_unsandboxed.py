"""The unsandboxed path (``WORKER_SHELL_SANDBOX=off``, and the container runtime's CLI, which
the sandbox would cut off from its daemon): a fresh directory under the temp dir,
``start_new_session=True`` so one ``killpg`` reaches the tree, and a pre-exec hook for the
rlimits and ``PR_SET_PDEATHSIG`` (``sandbox.preexec``).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from handler_contract.base import HandlerContext, HandlerOutcome, masking_sink
from sandbox.preexec import make_preexec
from sandbox.spawn import launch

from .shell_checkpoint import CheckpointFile
from .shell_environment import UPSTREAM_RESULTS_FILE_NAME, build_environment, upstream_payload
from .shell_outcomes import TRANSIENT_SPAWN_ERRNOS, spawn_failure
from .shell_supervisor import Supervisor
from .shell_workdirs import WORKDIR_PREFIX, remove_tree


def run_unsandboxed(
    command: list[str],
    config: Mapping[str, Any],
    ctx: HandlerContext,
    limits: Sequence[tuple[int, int, int]],
    kill_grace_seconds: float,
    identity: tuple[int, int] | None,
) -> HandlerOutcome:
    workdir = tempfile.mkdtemp(prefix=WORKDIR_PREFIX)
    if identity is not None:
        os.chown(workdir, *identity)
    try:
        stdin_data = upstream_payload(ctx)
        upstream_path: str | None = None
        if stdin_data is not None:
            upstream_path = os.path.join(workdir, UPSTREAM_RESULTS_FILE_NAME)
            with open(upstream_path, "wb") as fh:
                fh.write(stdin_data)
        env = build_environment(config.get("environment"), ctx, upstream_path)
        checkpoint = CheckpointFile(ctx, masking_sink(ctx), identity)
        env.update(checkpoint.environment(sandboxed=False))
        try:
            return run_process(
                command,
                env=env,
                ctx=ctx,
                limits=limits,
                kill_grace_seconds=kill_grace_seconds,
                identity=identity,
                stdin_data=stdin_data,
                cwd=workdir,
                preempt_aware=checkpoint.in_use,
            )
        finally:
            checkpoint.close()
    finally:
        remove_tree(workdir)


def run_process(
    command: list[str],
    *,
    env: Mapping[str, str],
    ctx: HandlerContext,
    limits: Sequence[tuple[int, int, int]],
    kill_grace_seconds: float,
    identity: tuple[int, int] | None = None,
    stdin_data: bytes | None = None,
    cwd: str | None = None,
    shown_command: str | None = None,
    preempt_aware: Callable[[], bool] | None = None,
) -> HandlerOutcome:
    """Run an argv outside any sandbox in its own session, with rlimits; supervised the same
    way. For WORKER_SHELL_SANDBOX=off and for a container runtime's CLI (which the sandbox
    would cut off from its daemon). Not masked: callers mask their outcome."""
    log = masking_sink(ctx)
    log.write("system", f"running {shown_command or shlex.join(command)}")
    try:
        launched = launch(
            command,
            env=env,
            stdin_piped=stdin_data is not None,
            sandboxed=False,
            cwd=cwd,
            preexec_fn=make_preexec(limits, os.getpid(), identity),
        )
    except FileNotFoundError:
        return spawn_failure(
            "command_not_found", f"command not found: {command[0]!r} (PATH={env.get('PATH')})"
        )
    except PermissionError as exc:
        return spawn_failure("command_not_executable", f"cannot execute {command[0]!r}: {exc}")
    except OSError as exc:
        outcome = spawn_failure("spawn_failed", f"could not start {command[0]!r}: {exc}")
        outcome.transient = exc.errno in TRANSIENT_SPAWN_ERRNOS
        return outcome
    except subprocess.SubprocessError as exc:
        return spawn_failure("spawn_failed", f"could not prepare the child process: {exc}")
    return Supervisor(
        launched, ctx, log, stdin_data, kill_grace_seconds, preempt_aware=preempt_aware
    ).run()
