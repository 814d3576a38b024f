"""Tasks and DAGs defined in Python, rendered to exactly the JSON the API takes.

    etl = Dag("etl", schedule=cron("0 2 * * *", tz="Europe/Berlin"))
    extract = etl.node("extract", handler=python("echo"), parameters={"day": "today"})
    load = etl.node("load", handler=shell("python3", "load.py"))
    extract >> load

`render()` returns the body of `POST /api/v1/tasks` or `POST /api/v1/dags`: only the keys
the API knows, and only those that were given, so the server's defaults apply to the rest
(and a server that refuses unknown keys accepts it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# ---- schedules -------------------------------------------------------------------------


def cron(
    expression: str, *, tz: str = "UTC", exclude: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    """5 fields, or 6 with seconds first, evaluated in the IANA zone `tz`; `exclude`: the
    calendar exclusions (`[{"calendar": "holidays:US"}, {"date": "2026-12-24"}]`)."""
    schedule: dict[str, Any] = {"type": "cron", "expression": expression, "timezone": tz}
    if exclude:
        schedule["exclude"] = list(exclude)
    return schedule


def interval(every: str) -> dict[str, Any]:
    """`"30s"`, `"5m"`, `"1h30m"` or ISO-8601 `"PT30S"`."""
    return {"type": "interval", "expression": every}


def once(run_at: str, *, tz: str = "UTC") -> dict[str, Any]:
    """ISO-8601; a time without an offset is read in `tz`."""
    return {"type": "once", "run_at": run_at, "timezone": tz}


def manual() -> dict[str, Any]:
    """Fires only when triggered."""
    return {"type": "manual"}


# ---- handlers --------------------------------------------------------------------------


def shell(*command: str, environment: Mapping[str, str] | None = None) -> dict[str, Any]:
    """An argv list, run without a shell."""
    handler: dict[str, Any] = {"type": "shell", "command": list(command)}
    if environment:
        handler["environment"] = dict(environment)
    return handler


def http(url: str, *, method: str = "GET", **options: Any) -> dict[str, Any]:
    """A webhook; `options` are the handler's other keys (headers, body, timeout_seconds)."""
    return {"type": "http", "url": url, "method": method, **options}


def python(callable_name: str) -> dict[str, Any]:
    """A function registered on the workers with `@handler(callable_name)`."""
    return {"type": "python", "callable": callable_name}


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int | None = None
    backoff: str | None = None  # fixed | linear | exponential | exponential_jitter
    base_delay_seconds: float | None = None
    max_delay_seconds: float | None = None

    def render(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def _given(**values: Any) -> dict[str, Any]:
    """The keyword arguments that were given (None means "the server's default")."""
    return {key: value for key, value in values.items() if value is not None}


def _retry(value: RetryPolicy | Mapping[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return None
    return value.render() if isinstance(value, RetryPolicy) else dict(value)


# ---- tasks -----------------------------------------------------------------------------


class Task:
    """A standalone task (`POST /api/v1/tasks`)."""

    def __init__(
        self,
        name: str,
        *,
        handler: Mapping[str, Any],
        schedule: Mapping[str, Any] | None = None,
        description: str | None = None,
        timeout_seconds: int | None = None,
        retry: RetryPolicy | Mapping[str, Any] | None = None,
        policy: Mapping[str, Any] | None = None,
        priority: int | None = None,
        parameters: Mapping[str, Any] | None = None,
        tags: Iterable[str] | None = None,
        notifications: Mapping[str, Any] | None = None,
        enabled: bool | None = None,
    ) -> None:
        self.name = name
        self.body: dict[str, Any] = _given(
            name=name,
            description=description,
            schedule=dict(schedule) if schedule is not None else manual(),
            handler=dict(handler),
            timeout_seconds=timeout_seconds,
            retry_policy=_retry(retry),
            policy=dict(policy) if policy is not None else None,
            priority=priority,
            parameters=dict(parameters) if parameters is not None else None,
            tags=list(tags) if tags is not None else None,
            notifications=dict(notifications) if notifications is not None else None,
            enabled=enabled,
        )

    kind = "task"

    def render(self) -> dict[str, Any]:
        return {key: _copy(value) for key, value in self.body.items()}

    def __repr__(self) -> str:
        return f"Task({self.name!r})"


# ---- DAGs ------------------------------------------------------------------------------


class Node:
    """One node of a DAG: an inline handler, or a reference to an existing task (`task=`,
    its name or a `Task`). `a >> b` makes b depend on a; lists work on either side."""

    def __init__(
        self,
        node_id: str,
        *,
        handler: Mapping[str, Any] | None = None,
        task: str | Task | None = None,
        parameters: Mapping[str, Any] | None = None,
        condition: Mapping[str, Any] | None = None,
        trigger_rule: str | None = None,
        map_over: str | list[Any] | None = None,
        timeout_seconds: int | None = None,
        retry: RetryPolicy | Mapping[str, Any] | None = None,
        priority: int | None = None,
        description: str | None = None,
    ) -> None:
        if (handler is None) == (task is None):
            raise ValueError(f"node {node_id!r} needs exactly one of handler= or task=")
        self.id = node_id
        self.depends_on: list[str] = []
        self.body: dict[str, Any] = _given(
            handler=dict(handler) if handler is not None else None,
            task=task.name if isinstance(task, Task) else task,
            parameters=dict(parameters) if parameters is not None else None,
            condition=dict(condition) if condition is not None else None,
            trigger_rule=trigger_rule,
            map_over=map_over,
            timeout_seconds=timeout_seconds,
            retry_policy=_retry(retry),
            priority=priority,
            description=description,
        )

    def after(self, *upstream: Node) -> Node:
        for node in upstream:
            if node.id not in self.depends_on:
                self.depends_on.append(node.id)
        return self

    def __rshift__(self, other: Node | list[Node]) -> Node | list[Node]:
        for node in other if isinstance(other, list) else [other]:
            node.after(self)
        return other

    def __rrshift__(self, other: list[Node]) -> Node:
        # [a, b] >> c
        return self.after(*other)

    def render(self) -> dict[str, Any]:
        rendered: dict[str, Any] = {"id": self.id}
        handler_or_task = {k: self.body[k] for k in ("handler", "task") if k in self.body}
        rendered.update(handler_or_task)
        if self.depends_on:
            rendered["depends_on"] = list(self.depends_on)
        for key, value in self.body.items():
            if key not in rendered:
                rendered[key] = _copy(value)
        return rendered

    def __repr__(self) -> str:
        return f"Node({self.id!r})"


class Dag:
    """A DAG (`POST /api/v1/dags`): `node()` adds nodes, `>>` links them."""

    kind = "dag"

    def __init__(
        self,
        name: str,
        *,
        schedule: Mapping[str, Any] | None = None,
        description: str | None = None,
        failure_policy: str | None = None,
        max_active_runs: int | None = None,
        catchup: str | None = None,
        overlap: str | None = None,
        parameters: Mapping[str, Any] | None = None,
        enabled: bool | None = None,
        policy: Mapping[str, Any] | None = None,
    ) -> None:
        """`policy` is a task's scheduling policy (catchup, overlap, jitter_seconds,
        start_at, end_at); `catchup`/`overlap` are its older top-level spelling."""
        self.name = name
        self.nodes: dict[str, Node] = {}
        self.settings: dict[str, Any] = _given(
            description=description,
            schedule=dict(schedule) if schedule is not None else None,
            failure_policy=failure_policy,
            max_active_runs=max_active_runs,
            catchup=catchup,
            overlap=overlap,
            parameters=dict(parameters) if parameters is not None else None,
            enabled=enabled,
            policy=dict(policy) if policy is not None else None,
        )

    def node(self, node_id: str, **options: Any) -> Node:
        return self.add(Node(node_id, **options))

    def add(self, node: Node) -> Node:
        if node.id in self.nodes:
            raise ValueError(f"DAG {self.name!r} already has a node {node.id!r}")
        self.nodes[node.id] = node
        return node

    def render(self) -> dict[str, Any]:
        rendered: dict[str, Any] = {"dag": self.name}
        rendered.update({key: _copy(value) for key, value in self.settings.items()})
        rendered["tasks"] = [node.render() for node in self.nodes.values()]
        return rendered

    def __repr__(self) -> str:
        return f"Dag({self.name!r}, nodes={list(self.nodes)})"


Definition = Task | Dag


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value
