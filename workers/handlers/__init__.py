"""What a worker runs for one execution attempt.

Pure Python on purpose: no Django, no Celery. The worker passes settings (allowed hosts,
container runtime, grace periods) in as arguments, so every handler can be tested with real
processes and sockets and nothing else. The contract types, config validation, the
registry of python callables and the HTTP handler live in `handler_contract`, which the
server imports too; import them from there.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from handler_contract.base import (
    STATUS_FAILED,
    HandlerConfigError,
    HandlerContext,
    HandlerOutcome,
    clip,
    mask_outcome,
)
from handler_contract.http import run_http
from handler_contract.registry import registered_names
from handler_contract.validation import PLATFORM_TASK_PREFIXES, validate_handler_config
from sandbox.options import ShellSandbox

from . import builtin  # noqa: F401  (registers the demo python handlers)
from .celery_task import SendTask, run_celery
from .container import ContainerRuntimeError, run_container
from .python import run_python
from .shell import run_shell

__all__ = ["run_handler"]


def run_handler(
    config: dict[str, Any],
    ctx: HandlerContext,
    *,
    allowed_hosts: Collection[str] = (),
    container_runtime: str | None = None,
    kill_grace_seconds: float = 5.0,
    celery_send_task: SendTask | None = None,
    shell_run_as: str | None = None,
    shell_sandbox: ShellSandbox | None = None,
    celery_allowed_tasks: Collection[str] = (),
    platform_task_prefixes: Collection[str] = PLATFORM_TASK_PREFIXES,
) -> HandlerOutcome:
    """Validate ``config`` and run the handler its ``type`` names; never raises for task errors.

    ``shell_sandbox`` defaults to the sandbox on, without egress: a caller that forgets it
    gets the safe behaviour. ``celery_allowed_tasks`` is the operator's CELERY_HANDLER_TASKS.

    An invalid config fails permanently ("invalid_config"). An unexpected exception inside the
    handler machinery fails transiently with error_class "internal:<ExcName>" so the worker
    records it instead of crashing mid-attempt.
    """
    try:
        normalized = validate_handler_config(
            config,
            python_registry_names=registered_names(),
            container_runtime=container_runtime,
            celery_allowed_tasks=celery_allowed_tasks,
            platform_task_prefixes=platform_task_prefixes,
        )
    except HandlerConfigError as exc:
        outcome = HandlerOutcome(
            status=STATUS_FAILED,
            error_class="invalid_config",
            error_message=clip(str(exc)),
            transient=False,
        )
        return mask_outcome(outcome, ctx.secrets_to_mask)

    handler_type = normalized["type"]
    try:
        if handler_type == "shell":
            outcome = run_shell(
                normalized,
                ctx,
                kill_grace_seconds=kill_grace_seconds,
                run_as=shell_run_as,
                sandbox=shell_sandbox,
            )
        elif handler_type == "http":
            outcome = run_http(normalized, ctx, allowed_hosts=allowed_hosts)
        elif handler_type == "python":
            outcome = run_python(normalized, ctx)
        elif handler_type == "celery":
            outcome = run_celery(normalized, ctx, send_task=celery_send_task)
        else:
            outcome = run_container(
                normalized,
                ctx,
                container_runtime=container_runtime,
                kill_grace_seconds=kill_grace_seconds,
                egress_allowed=shell_sandbox is not None and shell_sandbox.egress_allowed,
            )
    except ContainerRuntimeError as exc:
        outcome = HandlerOutcome(
            status=STATUS_FAILED,
            error_class="container_runtime",
            error_message=str(exc),
            transient=False,
        )
    except Exception as exc:
        outcome = HandlerOutcome(
            status=STATUS_FAILED,
            error_class=f"internal:{type(exc).__name__}",
            error_message=clip(f"{type(exc).__name__}: {exc}"),
            transient=True,
        )
    # Each handler masks already; this second pass also covers the error paths above.
    return mask_outcome(outcome, ctx.secrets_to_mask)
