"""What a shell task's command is given: its environment and its upstream results.

The child gets a clean environment: the configured variables, a minimal ``PATH``, the
``TASK_*`` variables and, while the run is traced, ``TRACEPARENT`` (the W3C context of the
handler's span, which OpenTelemetry SDKs in the command pick up). Nothing leaks from the
worker's own environment (credentials!).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from handler_contract.base import HandlerContext

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
UPSTREAM_RESULTS_FILE_NAME = "upstream_results.json"


def build_environment(
    config_env: Mapping[str, str] | None,
    ctx: HandlerContext,
    upstream_results_path: str | None = None,
) -> dict[str, str]:
    env = {"PATH": SAFE_PATH}
    env.update(config_env or {})
    env["TASK_PARAMETERS"] = json.dumps(ctx.parameters, sort_keys=True, default=str)
    env["TASK_EXECUTION_ID"] = str(ctx.execution_id)
    env["TASK_ATTEMPT"] = str(ctx.attempt)
    if ctx.traceparent:
        env["TRACEPARENT"] = ctx.traceparent
    if upstream_results_path is not None:
        env["TASK_UPSTREAM_RESULTS_FILE"] = upstream_results_path
    return env


def upstream_payload(ctx: HandlerContext) -> bytes | None:
    if ctx.upstream_results is None:
        return None
    return (json.dumps(ctx.upstream_results, default=str) + "\n").encode("utf-8")
