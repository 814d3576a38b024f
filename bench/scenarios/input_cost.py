"""input_cost: how long the API takes to answer worst-case inputs a tenant can send, each at
most one request body (1 MiB): the DAG bomb, DAGs at the caps, cron expressions that fire
rarely or never, conditions with huge lists and deep paths, deeply nested and very wide
parameters, and handler configs at the body limit. Every row goes through the whole stack
(Django's test client: middleware, authentication, parsing, validation, the database), as a
tenant admin; the target is an answer (accepted or refused) within 200 ms."""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench import support
from bench.report import Result

NAME = "input_cost"
QUICK = False
DESCRIPTION = "answer time of worst-case API inputs at the 1 MiB body limit (target 200 ms)"
BODY_LIMIT = 1024 * 1024
TARGET_MS = 200.0


def _client():
    from django.contrib.auth import get_user_model
    from django.test import Client

    from scheduler_app.services.tenants import membership_set

    tenant = support.bench_tenant()
    user, _ = get_user_model().objects.get_or_create(username="bench-input-cost")
    membership_set(tenant=tenant, user=user, role="admin")
    tenant.rate_limit_per_minute = 1_000_000
    tenant.save(update_fields=["rate_limit_per_minute"])
    client = Client()
    client.force_login(user)
    return client, tenant


def _cases(tenant) -> list[tuple[str, str, Callable[[], Any]]]:
    """(name, path, body factory); a body is JSON-encodable."""
    from tests.dag_bomb import dense_dag, short_id

    handler = {"type": "python", "callable": "noop"}

    def task(schedule: dict, **extra: Any) -> dict:
        return {
            "name": f"cost-{time.monotonic_ns()}",
            "schedule": schedule,
            "handler": handler,
            **extra,
        }

    def chain(nodes: int, *, edges_per_node: int) -> dict:
        ids = [short_id(i) for i in range(nodes)]
        tasks = []
        for index, node_id in enumerate(ids):
            first = max(0, index - edges_per_node)
            tasks.append({"id": node_id, "task": "cost-anchor", "depends_on": ids[first:index]})
        tasks[-1]["condition"] = {"field": f"{ids[0]}.status", "equals": "success"}
        return {"dag": f"cap-{time.monotonic_ns()}", "tasks": tasks}

    def nested(depth: int) -> Any:
        value: Any = "x"
        for _ in range(depth):
            value = {"a": value}
        return value

    def deep_raw(depth: int) -> str:
        return (
            '{"name": "deep", "schedule": {"type": "manual"}, "handler": {"type": "python",'
            ' "callable": "noop"}, "parameters": ' + '{"a":' * depth + "1" + "}" * depth + "}"
        )

    return [
        (
            "dag bomb: 2,000 tasks, ~128k edges (refused)",
            "/api/v1/dags",
            lambda: dense_dag(nodes=2000, body_bytes=BODY_LIMIT - 1024),
        ),
        (
            "dag at the caps: 5,000 tasks, 50,000 edges, a condition",
            "/api/v1/dags",
            lambda: chain(5000, edges_per_node=10),
        ),
        (
            "dag: 300 tasks, each depending on all before (44,850 edges)",
            "/api/v1/dags",
            lambda: chain(300, edges_per_node=300),
        ),
        (
            "dag: condition `in` a 100k-item list",
            "/api/v1/dags",
            lambda: {
                "dag": f"in-{time.monotonic_ns()}",
                "tasks": [
                    {"id": "a", "handler": handler},
                    {
                        "id": "b",
                        "handler": handler,
                        "depends_on": ["a"],
                        "condition": {
                            "field": "a.result." + ".".join(["k"] * 20),
                            "in": list(range(100_000)),
                        },
                    },
                ],
            },
        ),
        (
            "dag: condition path of 200k keys",
            "/api/v1/dags",
            lambda: {
                "dag": f"path-{time.monotonic_ns()}",
                "tasks": [
                    {"id": "a", "handler": handler},
                    {
                        "id": "b",
                        "handler": handler,
                        "depends_on": ["a"],
                        "condition": {
                            "field": "a.result." + ".".join(["k"] * 200_000),
                            "exists": True,
                        },
                    },
                ],
            },
        ),
        (
            "cron that never fires: 0 0 30 2 *",
            "/api/v1/tasks",
            lambda: task({"type": "cron", "expression": "0 0 30 2 *"}),
        ),
        (
            "cron, rare: 59 23 31 12 5 (Dec 31 on a Friday)",
            "/api/v1/tasks",
            lambda: task({"type": "cron", "expression": "59 23 31 12 5"}),
        ),
        (
            "cron, rare and zoned: 30 2 29 2 1, America/New_York",
            "/api/v1/tasks",
            lambda: task(
                {"type": "cron", "expression": "30 2 29 2 1", "timezone": "America/New_York"}
            ),
        ),
        (
            "cron: every field a 0..max list",
            "/api/v1/tasks",
            lambda: task(
                {
                    "type": "cron",
                    "expression": " ".join(
                        ",".join(str(v) for v in range(low, high + 1))
                        for low, high in ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
                    ),
                }
            ),
        ),
        (
            "cron: 1 MiB of text (refused)",
            "/api/v1/tasks",
            lambda: task(
                {"type": "cron", "expression": "1," * (BODY_LIMIT // 2 - 200) + "1 * * * *"}
            ),
        ),
        (
            "parameters: 60,000 keys",
            "/api/v1/tasks",
            lambda: task({"type": "manual"}, parameters={f"k{i}": i for i in range(60_000)}),
        ),
        (
            "parameters: nested 60 deep",
            "/api/v1/tasks",
            lambda: task({"type": "manual"}, parameters=nested(60)),
        ),
        ("parameters: nested 100,000 deep (refused)", "/api/v1/tasks", lambda: deep_raw(100_000)),
        (
            "trigger: 30,000 secret references (refused)",
            "trigger",
            lambda: {"parameters": {f"k{i}": "{{secret:x}}" for i in range(30_000)}},
        ),
        (
            "handler: shell command of 100,000 arguments",
            "/api/v1/tasks",
            lambda: {
                "name": f"cost-{time.monotonic_ns()}",
                "schedule": {"type": "manual"},
                "handler": {"type": "shell", "command": ["echo", *(["x"] * 100_000)]},
            },
        ),
        (
            "handler: shell environment of 50,000 variables",
            "/api/v1/tasks",
            lambda: {
                "name": f"cost-{time.monotonic_ns()}",
                "schedule": {"type": "manual"},
                "handler": {
                    "type": "shell",
                    "command": ["true"],
                    "environment": {f"V{i}": "x" for i in range(50_000)},
                },
            },
        ),
    ]


def _reset(tenant) -> None:
    from dags.models import Dag
    from scheduler_app.models import TaskDefinition

    Dag.platform.filter(tenant=tenant).delete()
    TaskDefinition.platform.filter(tenant=tenant).exclude(name="cost-anchor").delete()


def run(args: list[str]) -> Result:
    support.setup()
    from scheduler_app.services.task_definitions import task_create

    client, tenant = _client()
    _reset(tenant)
    if not tenant.tasks.filter(name="cost-anchor").exists():
        task_create(
            tenant=tenant,
            spec={
                "name": "cost-anchor",
                "schedule": {"type": "manual"},
                "handler": {"type": "python", "callable": "noop"},
            },
        )
    anchor = tenant.tasks.get(name="cost-anchor")
    repeats = 5 if support.is_full(args) else 3
    result = Result(
        scenario=NAME,
        columns=["input", "body KiB", "status", "median ms", "max ms", "within 200 ms"],
        targets={"answer": f"<= {TARGET_MS:.0f} ms for any body up to 1 MiB"},
    )
    # One request first: the first one of a process imports the URL configuration and views.
    client.get("/api/v1/tasks")
    for name, path, factory in _cases(tenant):
        body = factory()
        raw = body if isinstance(body, str) else json.dumps(body)
        if path == "trigger":
            path = f"/api/v1/tasks/{anchor.id}/trigger"
        timings, status = [], None
        for _ in range(repeats):
            if not isinstance(body, str):  # a fresh name each time, so nothing conflicts
                raw = json.dumps(factory())
            started = time.perf_counter()
            response = client.post(path, raw, content_type="application/json")
            timings.append((time.perf_counter() - started) * 1000)
            status = response.status_code
            _reset(tenant)
        median = statistics.median(timings)
        result.add(
            **{
                "input": name,
                "body KiB": round(len(raw) / 1024, 1),
                "status": status,
                "median ms": round(median, 1),
                "max ms": round(max(timings), 1),
                "within 200 ms": "yes" if max(timings) <= TARGET_MS else "NO",
            }
        )
    _validation_only(result, repeats)
    result.notes.append(
        f"{repeats} requests per input through Django's test client (no network), as a tenant "
        "admin with session auth; created tasks and DAGs deleted between requests"
    )
    load = os.getloadavg()[0]
    result.notes.append(f"load average when it ended: {load:.1f} on {os.cpu_count()} CPUs")
    return result


def _validation_only(result: Result, repeats: int) -> None:
    """The DAG validator alone (dags.spec, no HTTP, no database): its own share of the rows
    above, and proof that it is linear (the bomb used to take 9.6 s here)."""
    from dags.spec import DagSpecError, parse_dag_spec
    from tests.dag_bomb import dense_dag, edge_count

    bomb = dense_dag(nodes=2000, body_bytes=BODY_LIMIT - 1024)
    for name, limit in (
        ("dags.spec only: the bomb (refused at the edge cap)", None),
        ("dags.spec only: the bomb, no cap (validated in full)", edge_count(bomb)),
    ):
        timings = []
        for _ in range(repeats):
            started = time.perf_counter()
            try:
                parse_dag_spec(bomb, **({"max_edges": limit} if limit else {}))
                status = "valid"
            except DagSpecError:
                status = "refused"
            timings.append((time.perf_counter() - started) * 1000)
        result.add(
            **{
                "input": name,
                "body KiB": round(len(json.dumps(bomb)) / 1024, 1),
                "status": status,
                "median ms": round(statistics.median(timings), 1),
                "max ms": round(max(timings), 1),
                "within 200 ms": "yes" if max(timings) <= TARGET_MS else "NO",
            }
        )
