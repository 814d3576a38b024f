"""The sandboxed path of a shell run: bwrap started with vfork, its start gate opened (the
rlimits, egress's network), then supervised; a failed exec told apart from the command's own
exit code 1.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from handler_contract.base import (
    STATUS_FAILED,
    HandlerContext,
    HandlerOutcome,
    LogSink,
    clip,
    masking_sink,
)
from sandbox.argv import sandboxed_argv
from sandbox.egress import EgressNetwork, EgressSetupError
from sandbox.files import SandboxFiles
from sandbox.gate import SandboxStartError, StartGate
from sandbox.options import ShellSandbox
from sandbox.profile import NETWORK_EGRESS, SANDBOX_WORKDIR
from sandbox.rlimits import gate_sets_limits, set_limits
from sandbox.spawn import Launched, launch

from .shell_checkpoint import CheckpointFile
from .shell_environment import UPSTREAM_RESULTS_FILE_NAME, build_environment, upstream_payload
from .shell_outcomes import TRANSIENT_SPAWN_ERRNOS, spawn_failure
from .shell_supervisor import Supervisor


def run_sandboxed(
    command: list[str],
    network: str,
    ctx: HandlerContext,
    sandbox: ShellSandbox,
    limits: Sequence[tuple[int, int, int]],
    kill_grace_seconds: float,
    identity: tuple[int, int] | None,
    config: Mapping[str, Any],
) -> HandlerOutcome:
    log = masking_sink(ctx)
    stdin_data = upstream_payload(ctx)
    upstream_path = (
        f"{SANDBOX_WORKDIR}/{UPSTREAM_RESULTS_FILE_NAME}" if stdin_data is not None else None
    )
    env = build_environment(config.get("environment"), ctx, upstream_path)
    log.write("system", f"running {shlex.join(command)} (sandboxed, network {network})")
    checkpoint = CheckpointFile(ctx, log, identity)
    try:
        env.update(checkpoint.environment(sandboxed=True))
        return _run_sandboxed(
            command,
            network,
            ctx,
            sandbox,
            limits,
            kill_grace_seconds,
            identity,
            env,
            stdin_data,
            log,
            checkpoint,
        )
    finally:
        checkpoint.close()


def _run_sandboxed(
    command: list[str],
    network: str,
    ctx: HandlerContext,
    sandbox: ShellSandbox,
    limits: Sequence[tuple[int, int, int]],
    kill_grace_seconds: float,
    identity: tuple[int, int] | None,
    env: dict[str, str],
    stdin_data: bytes | None,
    log: LogSink,
    checkpoint: CheckpointFile,
) -> HandlerOutcome:
    egress: EgressNetwork | None = None
    gate: StartGate | None = None
    try:
        with SandboxFiles(network=network, upstream=stdin_data) as files:
            if network == NETWORK_EGRESS:
                egress = EgressNetwork(sandbox.egress_policy)
            gate = StartGate()
            argv = sandboxed_argv(
                command,
                limits=limits,
                files=files,
                run_as=identity,
                scratch_bytes=sandbox.scratch_bytes,
                gate=gate,
                bwrap=sandbox.bwrap,
                binds=checkpoint.bwrap_binds(),
            )
            launched = launch(
                argv,
                env=env,
                stdin_piped=stdin_data is not None,
                pass_fds=(*files.fds(), *gate.fds_for_bwrap()),
                sandboxed=True,
            )
        launched.egress = egress
        egress = None
    except (OSError, EgressSetupError) as exc:
        if egress is not None:
            egress.close()
        if gate is not None:
            gate.close()
        outcome = spawn_failure("spawn_failed", f"could not start the sandbox: {exc}")
        outcome.transient = isinstance(exc, OSError) and exc.errno in TRANSIENT_SPAWN_ERRNOS
        return outcome
    failure = open_gate(launched, gate, limits if gate_sets_limits(identity) else ())
    if failure is not None:
        return failure
    outcome = Supervisor(
        launched, ctx, log, stdin_data, kill_grace_seconds, preempt_aware=checkpoint.in_use
    ).run()
    return _classify_sandbox_exec_failure(outcome, command, env)


def open_gate(
    launched: Launched, gate: StartGate, limits: Sequence[tuple[int, int, int]]
) -> HandlerOutcome | None:
    """Between bwrap's report and the command's start: the rlimits on the sandbox's init
    (inherited by the command and all it starts), egress's network, then the go. On any
    failure the sandbox's init and bwrap are killed: no command runs unlimited."""
    try:
        pid = gate.sandbox_pid()
        launched.init_pid = pid
        set_limits(pid, limits)
        if launched.egress is not None:
            launched.egress.attach(pid)
        gate.release()
        return None
    except BaseException as exc:
        gate.kill()
        launched.kill()
        launched.proc.wait()
        gate.close()
        stderr = _stderr_tail(launched)
        launched.close()
        if not isinstance(exc, OSError | SandboxStartError | EgressSetupError):
            raise  # a bug, or the worker stopping: the sandbox is dead all the same
        if isinstance(exc, EgressSetupError):
            return HandlerOutcome(
                status=STATUS_FAILED,
                error_class="egress_failed",
                error_message=f"could not give the sandbox its network: {exc}",
                transient=True,
            )
        detail = f"{exc}: {stderr}" if stderr else str(exc)
        outcome = spawn_failure("spawn_failed", clip(f"could not start the sandbox: {detail}"))
        outcome.transient = True
        return outcome
    finally:
        gate.close()


def _stderr_tail(launched: Launched) -> str:
    """The last line bwrap wrote on stderr (why it exited early), without blocking."""
    pipe = launched.proc.stderr
    if pipe is None:
        return ""
    try:
        os.set_blocking(pipe.fileno(), False)
        text = (pipe.read() or b"").decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    for stream in (launched.proc.stdin, launched.proc.stdout, pipe):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    return text.splitlines()[-1] if text else ""


def _classify_sandbox_exec_failure(
    outcome: HandlerOutcome, command: list[str], env: Mapping[str, str]
) -> HandlerOutcome:
    # bwrap reports a failed execvp on stderr and exits 1; tell it apart from the command's
    # own exit code 1 so a typo stays a permanent error, as without the sandbox.
    message = outcome.error_message
    if outcome.exit_code != 1 or "bwrap: execvp" not in message:
        return outcome
    if "No such file or directory" in message:
        return spawn_failure(
            "command_not_found", f"command not found: {command[0]!r} (PATH={env['PATH']})"
        )
    if "Permission denied" in message:
        return spawn_failure("command_not_executable", f"cannot execute {command[0]!r}")
    return outcome
