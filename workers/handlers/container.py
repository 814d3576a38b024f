"""Container handler: ``<runtime> run --rm [options] IMAGE [COMMAND...]``, locked down.

* Every container runs with ``--network none`` (``--network`` default bridge only when the
  task asks for ``"network": "egress"`` and its tenant is allowed it), ``--read-only`` root
  filesystem with a ``/tmp`` tmpfs, ``--cap-drop ALL``, ``--security-opt
  no-new-privileges``, a non-root ``--user`` and ``--pids-limit``; ``--cpus`` and
  ``--memory`` come from the task's resources (``container_resource_flags``).
* The tenant's environment reaches the container only: each variable is an ``-e NAME=VALUE``
  argument. The runtime CLI itself runs with the operator's environment (PATH, HOME and the
  runtime's own variables such as DOCKER_HOST taken from the worker), never the task's, so a
  task's ``DOCKER_HOST`` cannot point the CLI at another daemon. The values are masked in the
  logged command line.
* The CLI runs outside the shell sandbox (it must reach the runtime's socket) as a plain
  supervised process with the same pipes, timeout and cancellation.
* Upstream results are sent on stdin (``-i`` is added when there are any).
* Limitation: killing the runtime CLI on timeout/cancel does not necessarily stop a container
  that the daemon (docker) keeps running; podman without a daemon behaves better.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from typing import Any

from handler_contract.base import HandlerContext, HandlerOutcome, mask_outcome
from handler_contract.validation import SUPPORTED_CONTAINER_RUNTIMES, cpu_cores, rlimit_requirements
from sandbox.rlimits import resolve_limits

from .shell_environment import build_environment
from .shell_outcomes import spawn_failure
from .shell_unsandboxed import run_process

NO_RUNTIME_MESSAGE = (
    "container handlers need a container runtime; none is configured on this installation"
)
TASK_ENV_NAMES = ("TASK_PARAMETERS", "TASK_EXECUTION_ID", "TASK_ATTEMPT", "TRACEPARENT")
# The user a container runs as unless its image's own non-root user is wanted (nobody).
CONTAINER_USER = "65534:65534"
DEFAULT_PIDS_LIMIT = 4096
# The runtime CLI's own environment: taken from the worker's (the operator's) environment,
# never from the task. Everything else in the worker's environment (its keys!) stays out.
RUNTIME_ENV_NAMES = (
    "PATH",
    "HOME",
    "XDG_RUNTIME_DIR",
    "DOCKER_HOST",
    "DOCKER_CONFIG",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
    "DOCKER_CONTEXT",
    "CONTAINER_HOST",
    "CONTAINERS_CONF",
)


class ContainerRuntimeError(RuntimeError):
    """No usable container runtime is configured."""


def check_runtime(container_runtime: str | None) -> str:
    if not container_runtime:
        raise ContainerRuntimeError(NO_RUNTIME_MESSAGE)
    if os.path.basename(container_runtime) not in SUPPORTED_CONTAINER_RUNTIMES:
        raise ContainerRuntimeError(
            f"unsupported container runtime {container_runtime!r}; "
            f"supported: {', '.join(SUPPORTED_CONTAINER_RUNTIMES)}"
        )
    return container_runtime


def container_resource_flags(written: Mapping[str, Any] | None) -> list[str]:
    """The task's resources as runtime options: the one place that knows their spelling.

    ``cpu`` (cores: 2, "0.5", "500m") becomes ``--cpus``; ``memory`` (a quantity such as
    "4Gi") or ``memory_bytes`` ``--memory``; ``processes`` ``--pids-limit`` (a default
    otherwise); the rlimit-like keys ``--ulimit`` (rlimits on the CLI process would not
    constrain the container).
    """
    requirements = rlimit_requirements(written)
    options: list[str] = []
    if written and "cpu" in written:
        options += ["--cpus", f"{cpu_cores(written['cpu']):g}"]
    if "memory_bytes" in requirements:
        options += ["--memory", str(int(requirements["memory_bytes"]))]
    options += ["--pids-limit", str(int(requirements.get("processes", DEFAULT_PIDS_LIMIT)))]
    ulimits = {"cpu_seconds": "cpu", "open_files": "nofile", "file_size_bytes": "fsize"}
    for key, name in ulimits.items():
        if key in requirements:
            value = int(requirements[key])
            options += ["--ulimit", f"{name}={value}:{value}"]
    return options


def build_container_argv(
    config: Mapping[str, Any],
    container_runtime: str,
    *,
    interactive: bool = False,
    task_env: Mapping[str, str] | None = None,
    egress_allowed: bool = False,
) -> list[str]:
    """The runtime argv for ``config`` (image and command must already be validated)."""
    runtime = check_runtime(container_runtime)
    image = config["image"]
    if not isinstance(image, str) or not image or image.startswith("-"):
        raise ValueError(f"invalid image reference {image!r}")
    egress = config.get("network") == "egress" and egress_allowed
    argv = [
        runtime,
        "run",
        "--rm",
        "--network",
        "bridge" if egress else "none",
        "--read-only",
        "--tmpfs",
        "/tmp",  # noqa: S108 (inside the container)
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--user",
        CONTAINER_USER,
    ]
    if interactive:
        argv.append("-i")
    env = dict(task_env or {})
    for name in [*(config.get("environment") or {}), *TASK_ENV_NAMES]:
        if name in env:
            argv += ["-e", f"{name}={env[name]}"]
    argv += container_resource_flags(config.get("resource_requirements"))
    # Everything after the image belongs to the container's command, never to the runtime.
    argv.append(image)
    argv += list(config.get("command") or [])
    return argv


def runtime_environment(worker_env: Mapping[str, str] | None = None) -> dict[str, str]:
    source = os.environ if worker_env is None else worker_env
    env = {name: source[name] for name in RUNTIME_ENV_NAMES if name in source}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return env


def _shown(argv: list[str]) -> str:
    # -e NAME=VALUE: show the name only (values may be secrets the masker does not know).
    shown = [
        f"{arg.split('=', 1)[0]}=****" if index and argv[index - 1] == "-e" else arg
        for index, arg in enumerate(argv)
    ]
    return shlex.join(shown)


def run_container(
    config: dict[str, Any],
    ctx: HandlerContext,
    *,
    container_runtime: str | None,
    kill_grace_seconds: float = 5.0,
    egress_allowed: bool = False,
) -> HandlerOutcome:
    """Run the configured image; raises ``ContainerRuntimeError`` without a runtime."""
    runtime = check_runtime(container_runtime)
    if config.get("network") == "egress" and not egress_allowed:
        return spawn_failure(
            "egress_not_allowed",
            'handler.network: "egress" is not allowed for this tenant (ask the operator)',
        )
    task_env = build_environment(config.get("environment"), ctx)
    stdin_data = None
    if ctx.upstream_results is not None:
        stdin_data = (json.dumps(ctx.upstream_results, default=str) + "\n").encode("utf-8")
    argv = build_container_argv(
        config,
        runtime,
        interactive=stdin_data is not None,
        task_env=task_env,
        egress_allowed=egress_allowed,
    )
    outcome = run_process(
        argv,
        env=runtime_environment(),
        ctx=ctx,
        limits=resolve_limits(None),
        kill_grace_seconds=kill_grace_seconds,
        stdin_data=stdin_data,
        shown_command=_shown(argv),
    )
    # What the supervisor measured is the runtime's CLI, not the container (which runs under
    # the runtime's daemon): no usage is recorded rather than a wrong one.
    outcome.cpu_seconds = outcome.peak_memory_bytes = None
    return mask_outcome(outcome, ctx.secrets_to_mask)


__all__ = [
    "NO_RUNTIME_MESSAGE",
    "ContainerRuntimeError",
    "build_container_argv",
    "check_runtime",
    "container_resource_flags",
    "run_container",
    "runtime_environment",
]
