"""Container handler: ``<runtime> run --rm [options] IMAGE [COMMAND...]`` via the shell handler.

* Environment variables are passed as ``-e NAME`` (no value): the runtime CLI copies the value
  from its own environment, which run_shell builds, so values never show up in ``ps``.
* ``resource_requirements`` become runtime options (``--memory``, ``--pids-limit``,
  ``--ulimit``) because rlimits on the CLI process would not constrain the container.
* Upstream results are sent on stdin (``-i`` is added when there are any); the
  ``TASK_UPSTREAM_RESULTS_FILE`` path exists only on the host and is not passed in.
* Limitation: killing the runtime CLI on timeout/cancel does not necessarily stop a container
  that the daemon (docker) keeps running; podman without a daemon behaves better.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .base import HandlerContext, HandlerOutcome
from .shell import run_shell
from .validation import SUPPORTED_CONTAINER_RUNTIMES, cpu_cores, rlimit_requirements

NO_RUNTIME_MESSAGE = (
    "container handlers need a container runtime; none is configured on this installation"
)
TASK_ENV_NAMES = ("TASK_PARAMETERS", "TASK_EXECUTION_ID", "TASK_ATTEMPT")


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


def _limit_options(written: Mapping[str, Any] | None) -> list[str]:
    requirements = rlimit_requirements(written)
    options: list[str] = []
    if written and "cpu" in written:
        options += ["--cpus", f"{cpu_cores(written['cpu']):g}"]
    if "memory_bytes" in requirements:
        options += ["--memory", str(int(requirements["memory_bytes"]))]
    if "processes" in requirements:
        options += ["--pids-limit", str(int(requirements["processes"]))]
    ulimits = {"cpu_seconds": "cpu", "open_files": "nofile", "file_size_bytes": "fsize"}
    for key, name in ulimits.items():
        if key in requirements:
            value = int(requirements[key])
            options += ["--ulimit", f"{name}={value}:{value}"]
    return options


def build_container_argv(
    config: Mapping[str, Any], container_runtime: str, *, interactive: bool = False
) -> list[str]:
    """The runtime argv for ``config`` (image and command must already be validated)."""
    runtime = check_runtime(container_runtime)
    image = config["image"]
    if not isinstance(image, str) or not image or image.startswith("-"):
        raise ValueError(f"invalid image reference {image!r}")
    argv = [runtime, "run", "--rm"]
    if interactive:
        argv.append("-i")
    for name in [*(config.get("environment") or {}), *TASK_ENV_NAMES]:
        argv += ["-e", name]
    argv += _limit_options(config.get("resource_requirements"))
    # Everything after the image belongs to the container's command, never to the runtime.
    argv.append(image)
    argv += list(config.get("command") or [])
    return argv


def run_container(
    config: dict[str, Any],
    ctx: HandlerContext,
    *,
    container_runtime: str | None,
    kill_grace_seconds: float = 5.0,
) -> HandlerOutcome:
    """Run the configured image; raises ``ContainerRuntimeError`` without a runtime."""
    runtime = check_runtime(container_runtime)
    argv = build_container_argv(config, runtime, interactive=ctx.upstream_results is not None)
    shell_config = {
        "type": "shell",
        "command": argv,
        "environment": dict(config.get("environment") or {}),
    }
    return run_shell(shell_config, ctx, kill_grace_seconds=kill_grace_seconds)


__all__ = [
    "NO_RUNTIME_MESSAGE",
    "ContainerRuntimeError",
    "build_container_argv",
    "check_runtime",
    "run_container",
]
