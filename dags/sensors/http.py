"""`http`: until a URL answers one of the expected statuses and, when given, a JSONPath test
on its JSON body holds (`{"path": "$.state", "equals": "ready"}`; not_equals, in, exists as
in DAG conditions).

The request is the http handler's own (`handler_contract.http.run_http`): the same SSRF guard
with the address pinned, no redirects, no proxies, a 1 MiB body cap, and the poke's timeout
on connect, on each read and on the whole exchange. Its JSONPath runs under the expression
budget (`budgets.jsonpath`): a query over budget is refused for good, not retried.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Collection, Mapping
from typing import Any

from budgets.jsonpath import jsonpath_values
from budgets.limits import BudgetExceeded, ExpressionBudget
from dags.sensors.base import Poke
from handler_contract.base import BufferedLogSink, HandlerContext
from handler_contract.http import run_http


def http_poke(
    config: Mapping[str, Any],
    *,
    allowed_hosts: Collection[str],
    timeout_seconds: float,
    budget: ExpressionBudget,
    secrets_to_mask: tuple[str, ...] = (),
) -> Poke:
    ctx = HandlerContext(
        execution_id="sensor",
        attempt=1,
        timeout_seconds=timeout_seconds,
        parameters={},
        log=BufferedLogSink(16 * 1024),
        cancel_event=threading.Event(),
        secrets_to_mask=secrets_to_mask,
    )
    request = {
        "url": config["url"],
        "method": config["method"],
        "headers": dict(config.get("headers") or {}),
        "expected_status": list(config["expected_status"]),
        "timeout_seconds": timeout_seconds,
    }
    outcome = run_http(request, ctx, allowed_hosts=allowed_hosts)
    if outcome.error_class == "ssrf_blocked":
        return Poke(done=False, error=outcome.error_message, refused=True)
    if not outcome.succeeded:
        return Poke(done=False, error=outcome.error_message or outcome.error_class)
    test = config.get("jsonpath")
    if test is None:
        return Poke(done=True, result=outcome.result)
    body = _json_body(outcome.result)
    try:
        values = jsonpath_values(test["path"], body, budget=budget)
    except BudgetExceeded as error:
        return Poke(done=False, error=f"jsonpath: {error.message}", refused=True)
    if _holds(test, values):
        return Poke(done=True, result=outcome.result)
    return Poke(done=False, error=f"jsonpath {test['path']} does not hold yet")


def _json_body(result: Any) -> Any:
    """The handler's result is the JSON object itself, or {status_code, body} for anything
    else (an array, text): parse the body then."""
    if isinstance(result, dict) and set(result) >= {"status_code", "body"}:
        try:
            return json.loads(result["body"])
        except (TypeError, ValueError):
            return None
    return result


def _holds(test: Mapping[str, Any], values: list[Any]) -> bool:
    """The DAG conditions' semantics (`dags.jsonpath_conditions`)."""
    if "exists" in test:
        return any(value is not None for value in values) == test["exists"]
    if "equals" in test:
        return any(value == test["equals"] for value in values)
    if "not_equals" in test:
        return all(value != test["not_equals"] for value in values)
    return any(value in test["in"] for value in values)
