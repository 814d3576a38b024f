"""The `sleep` and `sensor` node types of a DAG definition (pure Python: no Django).

    {"id": "nap", "type": "sleep", "duration": "2h"}
    {"id": "gate", "type": "sleep", "until": "{{ parameters.release_at }}"}
    {"id": "file", "type": "sensor", "sensor": {"kind": "s3", ...},
     "interval": "30s", "timeout": "6h", "on_timeout": "fail"}

Neither runs a handler: the engine records a row (`dags.models.DagTimer`) and the beat
leader's housekeeping ends the node when the row is due (`dags.services.timers`). This module
only parses: durations (`dags.spec_durations`, read as an approval's timeout is), the
`until` template (placeholders `parameters.<name>` only, rendered when the node becomes
ready) and each sensor kind's fields. The normalized node keeps the keys a definition is
written with (durations in seconds, defaults filled in), so a stored definition saves again
unchanged (the dashboard's editor and the API hand it back). What depends on the tenant
(its retention window, its allow-listed hosts) is checked by the definitions service
(`dags.services.timer_checks`).

Backoff: a sensor pokes every `interval`, and each poke that finds its condition false
doubles the wait, up to `max_interval` (default 10 minutes, never below `interval`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from budgets.limits import BudgetExceeded, ExpressionBudget
from budgets.templates import template_placeholders
from dags.jsonpath_conditions import JSONPathError, path_check
from dags.spec_durations import duration_seconds
from dags.spec_errors import DagSpecError
from dags.spec_keys import NOT_FOR_TYPED_WAITS

TIMER_TYPES = ("sleep", "sensor")
SENSOR_KINDS = ("http", "s3", "sql")
ON_TIMEOUT = ("fail", "skip")
# Keys a sleep or sensor node may have besides its graph keys (id, depends_on, ...).
TIMER_KEYS = {
    "type",
    "duration",
    "until",
    "sensor",
    "interval",
    "max_interval",
    "timeout",
    "on_timeout",
}
# Keys of nodes that run something: a timer runs nothing.
NOT_FOR_TIMERS = NOT_FOR_TYPED_WAITS
MIN_INTERVAL_SECONDS = 1.0
DEFAULT_INTERVAL_SECONDS = 60.0
DEFAULT_MAX_INTERVAL_SECONDS = 600.0
DEFAULT_SENSOR_TIMEOUT_SECONDS = 3600.0
BACKOFF_FACTOR = 2.0
# The absolute ceiling; the tenant's retention window is usually lower (timer_checks).
MAX_TIMER_SECONDS = 365 * 86400.0
MAX_QUERY_CHARS = 10_000
MAX_STATEMENT_TIMEOUT_SECONDS = 60.0
DEFAULT_STATEMENT_TIMEOUT_SECONDS = 10.0
MAX_HEADERS = 32
_PARAMETER = re.compile(r"^parameters(\.[A-Za-z0-9_-]+)+$")
_SECRET_ONLY = re.compile(r"^\{\{\s*secret:[A-Za-z0-9_.-]+\s*\}\}$")

HTTP_KEYS = {"kind", "url", "method", "headers", "expected_status", "jsonpath"}
S3_KEYS = {
    "kind",
    "endpoint_url",
    "bucket",
    "key",
    "prefix",
    "min_objects",
    "region",
    "access_key_id",
    "secret_access_key",
}
SQL_KEYS = {"kind", "dsn", "query", "statement_timeout"}
JSONPATH_TESTS = ("equals", "not_equals", "in", "exists")


def _bounded(value: Any, *, field: str, low: float, high: float = MAX_TIMER_SECONDS) -> float:
    seconds = duration_seconds(value, field=field)
    if not low <= seconds <= high:
        raise DagSpecError(
            f"{field} must be from {low:g} s to {high:.0f} s (it is {seconds:g} s)", field=field
        )
    return seconds


def timer_parse(raw: Mapping[str, Any], *, where: str, budget: ExpressionBudget) -> dict[str, Any]:
    """The normalized timer part of a `"type": "sleep"|"sensor"` node (its graph keys are
    the caller's)."""
    extra = [key for key in NOT_FOR_TIMERS if key in raw]
    if extra:
        raise DagSpecError(
            f"{where} is a {raw['type']} and runs nothing: no {', '.join(extra)}",
            field=f"{where}.{extra[0]}",
        )
    if raw["type"] == "sleep":
        return _sleep(raw, where=where, budget=budget)
    return _sensor(raw, where=where, budget=budget)


def _sleep(raw: Mapping[str, Any], *, where: str, budget: ExpressionBudget) -> dict[str, Any]:
    wrong = sorted({"sensor", "interval", "max_interval", "timeout", "on_timeout"} & set(raw))
    if wrong:
        raise DagSpecError(
            f"{where} is a sleep: no {', '.join(wrong)}", field=f"{where}.{wrong[0]}"
        )
    if ("duration" in raw) == ("until" in raw):
        raise DagSpecError(
            f"{where} needs exactly one of duration or until", field=f"{where}.duration"
        )
    if "duration" in raw:
        seconds = _bounded(raw["duration"], field=f"{where}.duration", low=0.0)
        return {"type": "sleep", "duration": seconds}
    return {"type": "sleep", "until": _until(raw["until"], where=where, budget=budget)}


def _until(value: Any, *, where: str, budget: ExpressionBudget) -> str:
    """An ISO-8601 aware time, or a template of `{{ parameters.<name> }}` rendering one."""
    field = f"{where}.until"
    if isinstance(value, datetime):  # a YAML timestamp
        value = value.isoformat()
    if not isinstance(value, str) or not value.strip():
        raise DagSpecError(f"{field} must be an ISO-8601 time or a template", field=field)
    try:
        names = [p.name for p in template_placeholders(value, budget=budget)]
    except BudgetExceeded as error:
        raise DagSpecError(f"{field}: {error.message}", field=field) from error
    for name in names:
        if not _PARAMETER.match(name):
            raise DagSpecError(
                f"{field}: unknown placeholder {{{{{name}}}}}; use {{{{ parameters.<name> }}}}",
                field=field,
            )
    if not names:
        until_parse(value, field=field)
    return value


def until_parse(text: str, *, field: str) -> datetime:
    """An aware datetime from ISO-8601 text ("Z" accepted); DagSpecError otherwise."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as error:
        raise DagSpecError(f"{field}: {text!r} is not an ISO-8601 time", field=field) from error
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise DagSpecError(f"{field}: {text!r} has no UTC offset (add Z or +hh:mm)", field=field)
    return moment


def _sensor(raw: Mapping[str, Any], *, where: str, budget: ExpressionBudget) -> dict[str, Any]:
    wrong = sorted({"duration", "until"} & set(raw))
    if wrong:
        raise DagSpecError(
            f"{where} is a sensor: no {', '.join(wrong)}", field=f"{where}.{wrong[0]}"
        )
    interval = _bounded(
        raw.get("interval", DEFAULT_INTERVAL_SECONDS),
        field=f"{where}.interval",
        low=MIN_INTERVAL_SECONDS,
    )
    max_interval = _bounded(
        raw.get("max_interval", max(interval, DEFAULT_MAX_INTERVAL_SECONDS)),
        field=f"{where}.max_interval",
        low=interval,
    )
    timeout = _bounded(
        raw.get("timeout", DEFAULT_SENSOR_TIMEOUT_SECONDS), field=f"{where}.timeout", low=interval
    )
    on_timeout = raw.get("on_timeout", "fail")
    if on_timeout not in ON_TIMEOUT:
        raise DagSpecError(
            f"{where}.on_timeout must be one of {', '.join(ON_TIMEOUT)}",
            field=f"{where}.on_timeout",
        )
    return {
        "type": "sensor",
        "sensor": sensor_config_parse(raw.get("sensor"), field=f"{where}.sensor", budget=budget),
        "interval": interval,
        "max_interval": max_interval,
        "timeout": timeout,
        "on_timeout": on_timeout,
    }


def sensor_config_parse(config: Any, *, field: str, budget: ExpressionBudget) -> dict[str, Any]:
    if not isinstance(config, Mapping):
        raise DagSpecError(f"{field} must be an object with a kind", field=field)
    kind = config.get("kind")
    if kind not in SENSOR_KINDS:
        raise DagSpecError(
            f"{field}.kind must be one of {', '.join(SENSOR_KINDS)}", field=f"{field}.kind"
        )
    allowed = {"http": HTTP_KEYS, "s3": S3_KEYS, "sql": SQL_KEYS}[kind]
    unknown = sorted(set(config) - allowed)
    if unknown:
        raise DagSpecError(
            f"{field} ({kind}) has unknown keys: {', '.join(unknown)}",
            field=f"{field}.{unknown[0]}",
        )
    parse = {"http": _http, "s3": _s3, "sql": _sql}[kind]
    return {"kind": kind, **parse(config, field=field, budget=budget)}


def _text(config: Mapping[str, Any], key: str, *, field: str, max_chars: int = 2048) -> str:
    value = config.get(key)
    if not isinstance(value, str) or not value.strip():
        raise DagSpecError(f"{field}.{key} is required", field=f"{field}.{key}")
    if len(value) > max_chars:
        raise DagSpecError(
            f"{field}.{key} must be at most {max_chars} characters", field=f"{field}.{key}"
        )
    return value.strip()


def _secret_reference(config: Mapping[str, Any], key: str, *, field: str) -> str:
    """Credentials are named, never written: `{{secret:name}}` (invariant 8)."""
    value = _text(config, key, field=field)
    if not _SECRET_ONLY.match(value):
        raise DagSpecError(
            f"{field}.{key} must be a secret reference like {{{{secret:name}}}}",
            field=f"{field}.{key}",
        )
    return value


def _http_url(value: str, *, field: str) -> str:
    parts = urlsplit(value)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise DagSpecError(f"{field} must be an http(s) URL", field=field)
    return value


def _http(config: Mapping[str, Any], *, field: str, budget: ExpressionBudget) -> dict[str, Any]:
    url = _http_url(_text(config, "url", field=field), field=f"{field}.url")
    method = str(config.get("method", "GET")).upper()
    if method not in ("GET", "HEAD"):
        raise DagSpecError(f"{field}.method must be GET or HEAD", field=f"{field}.method")
    headers = config.get("headers") or {}
    if (
        not isinstance(headers, Mapping)
        or len(headers) > MAX_HEADERS
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
    ):
        raise DagSpecError(
            f"{field}.headers must be an object of at most {MAX_HEADERS} text values",
            field=f"{field}.headers",
        )
    expected = config.get("expected_status", [200])
    if isinstance(expected, int) and not isinstance(expected, bool):
        expected = [expected]
    if (
        not isinstance(expected, list)
        or not expected
        or not all(
            isinstance(c, int) and not isinstance(c, bool) and 100 <= c <= 599 for c in expected
        )
    ):
        raise DagSpecError(
            f"{field}.expected_status must be HTTP status codes", field=f"{field}.expected_status"
        )
    normalized: dict[str, Any] = {
        "url": url,
        "method": method,
        "headers": dict(headers),
        "expected_status": list(expected),
    }
    if config.get("jsonpath") is not None:
        normalized["jsonpath"] = _jsonpath(
            config["jsonpath"], field=f"{field}.jsonpath", budget=budget
        )
    return normalized


def _jsonpath(test: Any, *, field: str, budget: ExpressionBudget) -> dict[str, Any]:
    """`{"path": "$.state", "equals": "ready"}` (or not_equals, in, exists) on the JSON body."""
    if not isinstance(test, Mapping) or not isinstance(test.get("path"), str):
        raise DagSpecError(f"{field} must be an object with a path", field=f"{field}.path")
    tests = [key for key in JSONPATH_TESTS if key in test]
    if len(tests) != 1 or set(test) - {"path", *JSONPATH_TESTS}:
        raise DagSpecError(
            f"{field} needs a path and one of {', '.join(JSONPATH_TESTS)}", field=field
        )
    try:
        path_check(test["path"], budget=budget)
    except (JSONPathError, BudgetExceeded) as error:
        raise DagSpecError(f"{field}.path: {error}", field=f"{field}.path") from error
    if tests[0] == "in" and not isinstance(test["in"], list):
        raise DagSpecError(f"{field}.in must be a list", field=f"{field}.in")
    if tests[0] == "exists" and not isinstance(test["exists"], bool):
        raise DagSpecError(f"{field}.exists must be true or false", field=f"{field}.exists")
    return {"path": test["path"], tests[0]: test[tests[0]]}


def _s3(config: Mapping[str, Any], *, field: str, budget: ExpressionBudget) -> dict[str, Any]:
    normalized: dict[str, Any] = {"bucket": _text(config, "bucket", field=field, max_chars=255)}
    if config.get("endpoint_url") is not None:
        normalized["endpoint_url"] = _http_url(
            _text(config, "endpoint_url", field=field), field=f"{field}.endpoint_url"
        )
    if ("key" in config) == ("prefix" in config):
        raise DagSpecError(f"{field} needs exactly one of key or prefix", field=f"{field}.key")
    if "key" in config:
        normalized["key"] = _text(config, "key", field=field, max_chars=1024)
    else:
        prefix = config.get("prefix")
        if not isinstance(prefix, str) or len(prefix) > 1024:
            raise DagSpecError(f"{field}.prefix must be text", field=f"{field}.prefix")
        normalized["prefix"] = prefix
        count = config.get("min_objects", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1000:
            raise DagSpecError(
                f"{field}.min_objects must be a whole number from 1 to 1000",
                field=f"{field}.min_objects",
            )
        normalized["min_objects"] = count
    normalized["region"] = str(config.get("region") or "us-east-1")
    for key in ("access_key_id", "secret_access_key"):
        if key in config:
            normalized[key] = _secret_reference(config, key, field=field)
    return normalized


def _sql(config: Mapping[str, Any], *, field: str, budget: ExpressionBudget) -> dict[str, Any]:
    timeout = _bounded(
        config.get("statement_timeout", DEFAULT_STATEMENT_TIMEOUT_SECONDS),
        field=f"{field}.statement_timeout",
        low=0.1,
        high=MAX_STATEMENT_TIMEOUT_SECONDS,
    )
    return {
        "dsn": _secret_reference(config, "dsn", field=field),
        "query": _text(config, "query", field=field, max_chars=MAX_QUERY_CHARS),
        "statement_timeout": timeout,
    }
