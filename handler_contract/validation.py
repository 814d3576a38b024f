"""Validation and normalisation of handler configurations.

The API validates when a task is saved and the worker validates again before running, so a
config edited behind the API's back still cannot reach a handler malformed. Unknown keys are
rejected rather than ignored: a misspelt optional key ("enviroment") would otherwise be
silently dropped and the task would run differently from what its author wrote.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import urlsplit

from handler_contract.base import HandlerConfigError

HANDLER_TYPES = ("shell", "http", "python", "container", "celery")
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
DEFAULT_HTTP_METHOD = "POST"
SUPPORTED_CONTAINER_RUNTIMES = ("docker", "podman")

# Keys accepted in shell/container "resource_requirements", mapped onto rlimits by shell.py.
RLIMIT_KEYS = ("cpu_seconds", "memory_bytes", "open_files", "processes", "file_size_bytes")
# The design document's spellings, Kubernetes' words: `cpu` in cores ("2.0", 0.5, "500m"),
# `memory` as a quantity ("512Mi", "4Gi", or bytes) and the run's `timeout_seconds`. Kept in
# the config as written (a task reads back what its author said); rlimit_requirements()
# turns memory into bytes for the shell handler, the container handler passes cpu and memory
# to the runtime, and the task takes timeout_seconds as its own timeout.
DOCUMENT_RESOURCE_KEYS = ("cpu", "memory", "timeout_seconds")
RESOURCE_KEYS = (*DOCUMENT_RESOURCE_KEYS, *RLIMIT_KEYS)
MAX_CPU_CORES = 1024
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_QUANTITY_FACTORS = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}

# Variables the shell handler sets itself; letting a config override them would let a task
# lie to its own command about which execution it is.
RESERVED_ENV_NAMES = frozenset(
    {
        "TASK_PARAMETERS",
        "TASK_EXECUTION_ID",
        "TASK_ATTEMPT",
        "TASK_UPSTREAM_RESULTS_FILE",
        "SCHEDULER_CHECKPOINT_FILE",
    }
)

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# RFC 9110 token characters.
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_IMAGE_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")
_HOP_BY_HOP_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer"}
)

_COMMON_KEYS = frozenset({"type"})
_ALLOWED_KEYS: dict[str, frozenset[str]] = {
    "shell": _COMMON_KEYS | {"command", "environment", "resource_requirements", "network"},
    "http": _COMMON_KEYS
    | {"url", "method", "headers", "body", "timeout_seconds", "expected_status"},
    "python": _COMMON_KEYS | {"callable"},
    "container": _COMMON_KEYS
    | {"image", "command", "environment", "resource_requirements", "network"},
    "celery": _COMMON_KEYS | {"task", "args", "kwargs", "queue"},
}
# A Celery task name: dotted Python-ish identifiers ("proj.tasks.send_report").
_CELERY_TASK_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*([.:\-][A-Za-z0-9_]+)*$")
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.:@\-]{1,200}$")
DEFAULT_CELERY_QUEUE = "celery"
# What a `celery` handler may never send, whatever CELERY_HANDLER_TASKS lists: the platform's
# own tasks (a tenant would ring its workers, e.g. claim or finish runs by id, deliver alerts,
# apply retention) and the queues its workers consume (the tier queues, the tiers' capability
# queues "<tier>.egress" and "<tier>.container", each worker's sticky "worker.<host>" queue).
# Inside Django the callers pass scheduler_app.platform_tasks' prefixes, which add every
# installed app; this default is the platform's own packages.
PLATFORM_TASK_PREFIXES = (
    "alerting.",
    "bench.",
    "celery.",
    "dags.",
    "data_lifecycle.",
    "handler_contract.",
    "project.",
    "scheduler_app.",
    "workers.",
)
PLATFORM_QUEUES = ("critical", "normal", "bulk")
# Every "<tier>.<anything>" is the platform's too: the capability queues of today and of
# capabilities added later.
PLATFORM_QUEUE_PREFIXES = ("worker.", *(f"{tier}." for tier in PLATFORM_QUEUES))
NETWORK_MODES = ("none", "egress")


def allowed_handler_types(container_runtime: str | None) -> tuple[str, ...]:
    if container_runtime:
        return HANDLER_TYPES
    return tuple(t for t in HANDLER_TYPES if t != "container")


def validate_handler_config(
    config: dict[str, Any],
    *,
    python_registry_names: Collection[str],
    container_runtime: str | None,
    celery_allowed_tasks: Collection[str] = (),
    require_runtime: bool = True,
    platform_task_prefixes: Collection[str] = PLATFORM_TASK_PREFIXES,
) -> dict[str, Any]:
    """Return a normalised copy of ``config`` or raise ``HandlerConfigError``.

    ``require_runtime=False`` (saving a task) accepts a container handler on a process that
    has no runtime itself: the runs go to workers that offer one (scheduler_app.fleet.capabilities).
    ``platform_task_prefixes``: task names a celery handler may never send.
    """
    if not isinstance(config, Mapping):
        raise HandlerConfigError("handler", "must be an object")
    handler_type = config.get("type")
    allowed = allowed_handler_types(container_runtime) if require_runtime else HANDLER_TYPES
    if handler_type == "container" and not container_runtime and require_runtime:
        raise HandlerConfigError(
            "handler.type",
            "container handlers need a container runtime; none is configured on this installation",
        )
    if not isinstance(handler_type, str) or handler_type not in allowed:
        shown = repr(handler_type) if handler_type is not None else "missing"
        raise HandlerConfigError(
            "handler.type", f"unknown handler type {shown}; allowed: {', '.join(allowed)}"
        )

    for key in config:
        if key not in _ALLOWED_KEYS[handler_type]:
            if key == "working_directory":
                raise HandlerConfigError(
                    "handler.working_directory",
                    "is not supported: every run gets a fresh temporary working directory",
                )
            raise HandlerConfigError(
                f"handler.{key}",
                f"unknown field for a {handler_type} handler; allowed: "
                f"{', '.join(sorted(_ALLOWED_KEYS[handler_type]))}",
            )

    if handler_type == "shell":
        return _validate_shell(config)
    if handler_type == "http":
        return _validate_http(config)
    if handler_type == "python":
        return _validate_python(config, python_registry_names)
    if handler_type == "celery":
        return _validate_celery(config, celery_allowed_tasks, tuple(platform_task_prefixes))
    return _validate_container(config)


def celery_platform_task(name: str, prefixes: tuple[str, ...] = PLATFORM_TASK_PREFIXES) -> bool:
    return name.startswith(prefixes)


def celery_platform_queue(name: str) -> bool:
    return name in PLATFORM_QUEUES or name.startswith(PLATFORM_QUEUE_PREFIXES)


def celery_allowed(
    task: str,
    queue: str,
    allowed: Collection[str],
    platform_task_prefixes: tuple[str, ...] = PLATFORM_TASK_PREFIXES,
) -> bool:
    """``allowed`` holds ``task`` (on the default queue) or ``task@queue`` entries."""
    if celery_platform_task(task, platform_task_prefixes) or celery_platform_queue(queue):
        return False
    entry = task if queue == DEFAULT_CELERY_QUEUE else f"{task}@{queue}"
    return entry in allowed or f"{task}@{queue}" in allowed


def _validate_celery(
    config: Mapping[str, Any], allowed: Collection[str], platform_task_prefixes: tuple[str, ...]
) -> dict[str, Any]:
    task = config.get("task")
    if not isinstance(task, str) or not _CELERY_TASK_NAME.match(task) or len(task) > 255:
        raise HandlerConfigError("handler.task", "is required: the Celery task name to send")
    if celery_platform_task(task, platform_task_prefixes):
        raise HandlerConfigError(
            "handler.task", f"{task!r} is one of the platform's own tasks and cannot be sent"
        )
    args = config.get("args", [])
    if not isinstance(args, list):
        raise HandlerConfigError("handler.args", "must be a list")
    kwargs = config.get("kwargs", {})
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise HandlerConfigError("handler.kwargs", "must be an object with string keys")
    queue = config.get("queue", DEFAULT_CELERY_QUEUE)
    if not isinstance(queue, str) or not _QUEUE_NAME.match(queue):
        raise HandlerConfigError("handler.queue", "must be a queue name")
    if celery_platform_queue(queue):
        raise HandlerConfigError(
            "handler.queue", f"{queue!r} is a queue of the platform's own workers"
        )
    if not celery_allowed(task, queue, allowed, platform_task_prefixes):
        shown = task if queue == DEFAULT_CELERY_QUEUE else f"{task}@{queue}"
        raise HandlerConfigError(
            "handler.task",
            f"{shown!r} is not in this installation's CELERY_HANDLER_TASKS "
            f"({', '.join(sorted(allowed)) or 'empty: no celery task may be sent'})",
        )
    try:
        json.dumps([args, kwargs], allow_nan=False)
    except (TypeError, ValueError) as error:
        raise HandlerConfigError("handler.args", "args and kwargs must be plain JSON") from error
    return {"type": "celery", "task": task, "args": args, "kwargs": dict(kwargs), "queue": queue}


def _validate_shell(config: Mapping[str, Any]) -> dict[str, Any]:
    normalized: dict[str, Any] = {
        "type": "shell",
        "command": _argv(config.get("command"), "handler.command", required=True),
        "environment": _environment(config.get("environment"), "handler.environment"),
    }
    limits = _resources(
        config.get("resource_requirements"), "handler.resource_requirements", cores=False
    )
    if limits:
        normalized["resource_requirements"] = limits
    _network(config, normalized)
    return normalized


def _network(config: Mapping[str, Any], normalized: dict[str, Any]) -> None:
    """``network``: "none" (the default, left out) or "egress" (the tenant must be allowed
    it; the API and the worker check that, not this pure function)."""
    network = config.get("network", "none")
    if network not in NETWORK_MODES:
        raise HandlerConfigError("handler.network", f"must be one of {', '.join(NETWORK_MODES)}")
    if network != "none":
        normalized["network"] = network


def _validate_container(config: Mapping[str, Any]) -> dict[str, Any]:
    image = config.get("image")
    if not isinstance(image, str) or not image.strip():
        raise HandlerConfigError("handler.image", "is required and must be a non-empty string")
    # A leading "-" would be read by the runtime as an option (argument injection).
    if not _IMAGE_REF.match(image):
        raise HandlerConfigError("handler.image", f"{image!r} is not a valid image reference")
    normalized: dict[str, Any] = {
        "type": "container",
        "image": image,
        "command": _argv(config.get("command"), "handler.command", required=False),
        "environment": _environment(config.get("environment"), "handler.environment"),
    }
    limits = _resources(
        config.get("resource_requirements"), "handler.resource_requirements", cores=True
    )
    if limits:
        normalized["resource_requirements"] = limits
    _network(config, normalized)
    return normalized


def _argv(value: Any, field: str, *, required: bool) -> list[str]:
    if value is None and not required:
        return []
    if isinstance(value, str):
        raise HandlerConfigError(
            field,
            "must be a list of arguments (argv), not a shell string; use "
            '["sh", "-c", "..."] explicitly if you really need a shell',
        )
    if not isinstance(value, list) or not value:
        raise HandlerConfigError(field, "is required and must be a non-empty list of strings")
    for index, arg in enumerate(value):
        if not isinstance(arg, str):
            raise HandlerConfigError(f"{field}[{index}]", "must be a string")
        if "\x00" in arg:
            raise HandlerConfigError(f"{field}[{index}]", "must not contain NUL bytes")
    if not value[0].strip():
        raise HandlerConfigError(f"{field}[0]", "the program name must not be empty")
    return list(value)


def _environment(value: Any, field: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise HandlerConfigError(field, "must be an object of string values")
    env: dict[str, str] = {}
    for name, val in value.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise HandlerConfigError(f"{field}.{name}", "is not a valid environment variable name")
        if name in RESERVED_ENV_NAMES:
            raise HandlerConfigError(f"{field}.{name}", "is set by the worker and is reserved")
        if not isinstance(val, str):
            raise HandlerConfigError(f"{field}.{name}", "must be a string")
        if "\x00" in val:
            raise HandlerConfigError(f"{field}.{name}", "must not contain NUL bytes")
        env[name] = val
    return env


def _resources(value: Any, field: str, *, cores: bool) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise HandlerConfigError(field, "must be an object")
    limits: dict[str, Any] = {}
    for key, val in value.items():
        if key not in RESOURCE_KEYS:
            raise HandlerConfigError(
                f"{field}.{key}", f"unknown resource; allowed: {', '.join(RESOURCE_KEYS)}"
            )
        if key == "cpu":
            if not cores:
                # A shell run is limited by rlimits, and no rlimit caps cores.
                raise HandlerConfigError(
                    f"{field}.cpu",
                    "cores can be limited for container handlers only; "
                    "a shell handler takes cpu_seconds",
                )
            cpu_cores(val, field=f"{field}.cpu")
        elif key == "memory":
            memory_quantity_bytes(val, field=f"{field}.memory")
        elif isinstance(val, bool) or not isinstance(val, int) or val <= 0:
            raise HandlerConfigError(f"{field}.{key}", "must be a positive integer")
        limits[key] = val
    if "memory" in limits and "memory_bytes" in limits:
        raise HandlerConfigError(
            f"{field}.memory", "give memory or memory_bytes, not both (they are one limit)"
        )
    return limits


def cpu_cores(value: Any, *, field: str = "cpu") -> float:
    """Cores from Kubernetes' spellings: 2, 0.5, "2.0", "500m" (millicores)."""
    cores: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        cores = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            cores = int(text[:-1]) / 1000 if text.endswith("m") else float(text)
        except ValueError:
            cores = None
    if cores is None or not math.isfinite(cores) or not 0 < cores <= MAX_CPU_CORES:
        raise HandlerConfigError(
            field, f'must be a number of cores above 0 and at most {MAX_CPU_CORES} ("2.0", "500m")'
        )
    return cores


def memory_quantity_bytes(value: Any, *, field: str = "memory") -> int:
    """Bytes from a Kubernetes quantity ("512Mi", "4Gi", "1G") or a plain number of bytes."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = _QUANTITY.match(value.strip()) if isinstance(value, str) else None
    number = int(float(match.group(1)) * _QUANTITY_FACTORS[match.group(2)]) if match else 0
    if number <= 0:
        raise HandlerConfigError(
            field, 'must be a quantity such as "512Mi" or "4Gi", or a number of bytes'
        )
    return number


def rlimit_requirements(requirements: Mapping[str, Any] | None) -> dict[str, int]:
    """The rlimit keys of a validated resource_requirements: `memory` as memory_bytes;
    `cpu` (cores) and `timeout_seconds` (the task's timeout) are not rlimits."""
    limits = {key: int(val) for key, val in (requirements or {}).items() if key in RLIMIT_KEYS}
    if requirements and "memory" in requirements:
        limits["memory_bytes"] = memory_quantity_bytes(requirements["memory"])
    return limits


def _validate_http(config: Mapping[str, Any]) -> dict[str, Any]:
    url = config.get("url")
    if not isinstance(url, str) or not url.strip():
        raise HandlerConfigError("handler.url", "is required and must be a string")
    url = url.strip()
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise HandlerConfigError("handler.url", f"is not a valid URL: {exc}") from exc
    if parts.scheme.lower() not in ("http", "https"):
        raise HandlerConfigError("handler.url", "must use http or https")
    if not parts.hostname:
        raise HandlerConfigError("handler.url", "must include a host")
    if parts.username is not None or parts.password is not None:
        # Credentials in URLs end up in logs and error messages; headers are the place.
        raise HandlerConfigError(
            "handler.url", "must not contain credentials; send them in a header instead"
        )
    if port == 0:
        raise HandlerConfigError("handler.url", "port 0 is not valid")
    if any(ch.isspace() or ord(ch) < 0x20 for ch in url):
        raise HandlerConfigError("handler.url", "must not contain whitespace or control chars")

    method = config.get("method", DEFAULT_HTTP_METHOD)
    if not isinstance(method, str) or method.upper() not in HTTP_METHODS:
        raise HandlerConfigError("handler.method", f"must be one of {', '.join(HTTP_METHODS)}")

    normalized: dict[str, Any] = {
        "type": "http",
        "url": url,
        "method": method.upper(),
        "headers": _headers(config.get("headers")),
    }
    if "body" in config:
        try:
            json.dumps(config["body"], allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise HandlerConfigError("handler.body", f"must be JSON-serialisable: {exc}") from exc
        normalized["body"] = config["body"]

    timeout = config.get("timeout_seconds")
    if timeout is not None:
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise HandlerConfigError("handler.timeout_seconds", "must be a positive number")
        normalized["timeout_seconds"] = float(timeout)

    expected = config.get("expected_status")
    if expected is not None:
        if not isinstance(expected, list) or not expected:
            raise HandlerConfigError(
                "handler.expected_status", "must be a non-empty list of status codes"
            )
        for index, code in enumerate(expected):
            if isinstance(code, bool) or not isinstance(code, int) or not 100 <= code <= 599:
                raise HandlerConfigError(
                    f"handler.expected_status[{index}]", "must be an HTTP status code (100-599)"
                )
        normalized["expected_status"] = sorted(set(expected))
    return normalized


def _headers(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise HandlerConfigError("handler.headers", "must be an object of string values")
    headers: dict[str, str] = {}
    for name, val in value.items():
        field = f"handler.headers.{name}"
        if not isinstance(name, str) or not _HEADER_NAME.match(name):
            raise HandlerConfigError(field, "is not a valid header name")
        if name.lower() in _HOP_BY_HOP_HEADERS:
            # Host in particular must stay ours: the connection is pinned to a checked address.
            raise HandlerConfigError(field, "is managed by the worker and cannot be set")
        if not isinstance(val, str):
            raise HandlerConfigError(field, "must be a string")
        if any(ch in val for ch in "\r\n\x00"):
            raise HandlerConfigError(field, "must not contain CR, LF or NUL")
        headers[name] = val
    return headers


def _validate_python(config: Mapping[str, Any], registry_names: Collection[str]) -> dict[str, Any]:
    name = config.get("callable")
    if not isinstance(name, str) or not name:
        raise HandlerConfigError("handler.callable", "is required and must be a string")
    if name not in registry_names:
        known = sorted(registry_names)
        shown = ", ".join(known[:20]) + (", ..." if len(known) > 20 else "")
        raise HandlerConfigError(
            "handler.callable",
            f"{name!r} is not a registered python handler; registered: {shown or 'none'}",
        )
    return {"type": "python", "callable": name}
