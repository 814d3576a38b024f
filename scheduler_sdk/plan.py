"""`apply` as a plan: what each definition would change on the server, then doing it.

Definitions are matched by name. A task's plan compares the keys its definition names with
the server's (`schedule`, `retry_policy` and `policy` key by key; `handler`, `parameters`,
`tags`, `notifications` as wholes) and is applied with PATCH, so a key the file leaves out
keeps its server value. A DAG's definition is the whole of it: the plan compares it,
normalized the way the server normalizes it (dags.spec), with the current version's, and
applies it with PUT, which makes a new version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from scheduler_sdk.errors import DefinitionError

# Objects the server completes with defaults key by key: compared over the keys given.
TASK_MERGED_KEYS = ("schedule", "retry_policy", "policy")
# Objects replaced whole, that the server completes with empty defaults (`environment: {}`):
# a key the definition leaves out counts as a removal only when the server's value is not empty.
TASK_REPLACED_KEYS = ("handler", "notifications")


class Definition(Protocol):
    kind: str  # "task" | "dag"
    name: str

    def render(self) -> dict[str, Any]: ...


EMPTY: tuple[Any, ...] = ({}, [], None, "")


@dataclass(frozen=True)
class DiffLine:
    op: str  # "+" added, "-" removed, "~" changed
    path: str
    old: Any = None
    new: Any = None


@dataclass
class Change:
    kind: str
    name: str
    action: str  # create | update | unchanged | delete
    body: dict[str, Any] | None = None
    object_id: str | None = None
    diff: list[DiffLine] = field(default_factory=list)
    result_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "action": self.action,
            "id": self.result_id or self.object_id,
            "diff": [
                {"op": line.op, "path": line.path, "old": line.old, "new": line.new}
                for line in self.diff
            ],
        }


@dataclass
class Plan:
    changes: list[Change]

    @property
    def pending(self) -> list[Change]:
        return [change for change in self.changes if change.action != "unchanged"]

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(("create", "update", "unchanged", "delete"), 0)
        for change in self.changes:
            counts[change.action] += 1
        return counts


# ---- comparing ---------------------------------------------------------------------------


def _flat(value: Any, path: str) -> dict[str, Any]:
    if isinstance(value, dict) and (value or not path):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flat(item, f"{path}.{key}" if path else str(key)))
        return flat
    return {path: value}


def _diff(old: dict[str, Any], new: dict[str, Any]) -> list[DiffLine]:
    """Leaf by leaf, in dotted paths; lists are leaves (a changed list shows whole)."""
    before, after = _flat(old, ""), _flat(new, "")
    lines = []
    for path in sorted(before.keys() | after.keys()):
        if path not in before:
            lines.append(DiffLine("+", path, new=after[path]))
        elif path not in after:
            lines.append(DiffLine("-", path, old=before[path]))
        elif before[path] != after[path]:
            lines.append(DiffLine("~", path, old=before[path], new=after[path]))
    return lines


def task_diff(current: dict[str, Any], desired: dict[str, Any]) -> list[DiffLine]:
    """The server's task against a definition, over the keys the definition names (a task
    is PATCHed: the keys it leaves out keep their values)."""
    seen: dict[str, Any] = {}
    for key, value in desired.items():
        server = current.get(key)
        if key in TASK_MERGED_KEYS and isinstance(value, dict) and isinstance(server, dict):
            seen[key] = {sub: server.get(sub) for sub in value}
        elif key in TASK_REPLACED_KEYS and isinstance(value, dict) and isinstance(server, dict):
            seen[key] = {
                sub: item for sub, item in server.items() if sub in value or item not in EMPTY
            }
        else:
            seen[key] = server
    return _diff(seen, desired)


# What dags.spec_durations reads of a duration (seconds, or parts from the largest unit:
# `1d12h`, `1.5h`, `90m`, `500ms`), for an approval's timeout in whole seconds. The client does
# not import the server's code; tests/cli/test_sdk_approval_plan.py holds the two to the same
# normalization.
_DURATION_PART = re.compile(r"(\d{1,9}(?:\.\d{1,9})?)(ms|d|h|m|s)")
_UNIT_SECONDS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def _seconds(value: Any) -> Any:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return round(value)
    if not isinstance(value, str):
        return value  # what the server will refuse
    text = value.strip()
    if re.fullmatch(r"\d{1,12}(?:\.\d{1,9})?", text):
        return round(float(text))
    position, last_unit, total = 0, -1, 0.0
    for part in _DURATION_PART.finditer(text):
        unit = list(_UNIT_SECONDS).index(part.group(2))
        if part.start() != position or unit <= last_unit:
            return value
        position, last_unit = part.end(), unit
        total += float(part.group(1)) * _UNIT_SECONDS[part.group(2)]
    return round(total) if position and position == len(text) else value


def _approval(raw: dict[str, Any]) -> dict[str, Any]:
    """An approval node's settings as the server stores them (`approval`), from a file's
    spelling (`approvers`, `timeout`, `on_timeout`, `message`) or the stored one."""
    if isinstance(raw.get("approval"), dict):
        return dict(raw["approval"])
    approvers = raw.get("approvers") or {}
    return {
        "role": approvers.get("role"),
        "users": list(approvers.get("users") or []),
        "count": approvers.get("count", 1),
        "timeout_seconds": _seconds(raw.get("timeout", 86400)),
        "on_timeout": raw.get("on_timeout", "reject"),
        "message": raw.get("message", ""),
    }


def _node(raw: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = {"id": raw.get("id")}
    if raw.get("type") == "approval":
        node.update(type="approval", approval=_approval(raw))
    for key in ("handler", "task"):
        if key in raw:
            node[key] = raw[key]
    depends_on = raw.get("depends_on") or []
    node["depends_on"] = [depends_on] if isinstance(depends_on, str) else list(depends_on)
    node["trigger_rule"] = raw.get("trigger_rule", "all_success")
    condition = raw.get("condition")
    if condition is not None:
        node["condition"] = {
            key: value
            for key, value in condition.items()
            if key in ("field", "equals", "not_equals", "in", "exists")
        }
    map_over = raw.get("map_over")
    if isinstance(map_over, list):
        node["map_over"] = {"items": map_over}
    elif isinstance(map_over, dict):
        node["map_over"] = {"field": map_over.get("field")}
    elif map_over is not None:
        node["map_over"] = {"field": map_over}
    for key in ("timeout_seconds", "retry_policy", "priority", "description", "parameters"):
        if key in raw:
            node[key] = raw[key]
    return node


def dag_normalized(raw: dict[str, Any]) -> dict[str, Any]:
    """A definition as the server stores it (the defaults of dags.spec.parse_dag_spec)."""
    return {
        "dag": str(raw.get("dag", raw.get("name", ""))).strip(),
        "description": raw.get("description") or "",
        "schedule": dict(raw.get("schedule") or {"type": "manual"}),
        "failure_policy": raw.get("failure_policy", "skip_downstream"),
        "catchup": raw.get("catchup", "latest"),
        "overlap": raw.get("overlap", "allow"),
        "max_active_runs": raw.get("max_active_runs", 16),
        "enabled": bool(raw.get("enabled", True)),
        "parameters": dict(raw.get("parameters") or {}),
        "tasks": [_node(node) for node in raw.get("tasks") or []],
    }


def _by_node(spec: dict[str, Any]) -> dict[str, Any]:
    keyed = {key: value for key, value in spec.items() if key != "tasks"}
    keyed["tasks"] = {node["id"]: node for node in spec.get("tasks") or []}
    return keyed


def dag_diff(current: dict[str, Any] | None, desired: dict[str, Any]) -> list[DiffLine]:
    old, new = dag_normalized(current or {}), dag_normalized(desired)
    lines = _diff(_by_node(old), _by_node(new))
    if not lines and old != new:
        order = [n["id"] for n in old["tasks"]], [n["id"] for n in new["tasks"]]
        lines.append(DiffLine("~", "tasks (order)", old=order[0], new=order[1]))
    return lines


# ---- planning and applying ---------------------------------------------------------------


def _check_unique(definitions: list[Definition]) -> None:
    seen: set[tuple[str, str]] = set()
    for definition in definitions:
        key = (definition.kind, definition.name)
        if key in seen:
            raise DefinitionError(f"{definition.kind} {definition.name!r} is defined twice")
        seen.add(key)


def plan_apply(client: Any, definitions: list[Definition], *, prune: bool = False) -> Plan:
    _check_unique(definitions)
    # Tasks first: a DAG node may name a task the same apply creates.
    ordered = sorted(definitions, key=lambda d: 0 if d.kind == "task" else 1)
    tasks = {task.name: task for task in client.tasks()}
    dags = {dag.name: dag for dag in client.dags()}
    changes: list[Change] = []
    for definition in ordered:
        body = definition.render()
        if definition.kind == "task":
            current = tasks.get(definition.name)
            if current is None:
                diff = _diff({}, body)
                changes.append(Change("task", definition.name, "create", body, diff=diff))
                continue
            diff = task_diff(current.raw, body)
            action = "update" if diff else "unchanged"
            changes.append(Change("task", definition.name, action, body, current.id, diff))
        else:
            listed = dags.get(definition.name)
            if listed is None:
                diff = _diff({}, _by_node(dag_normalized(body)))
                changes.append(Change("dag", definition.name, "create", body, diff=diff))
                continue
            current_dag = client.dag(listed.id)
            diff = dag_diff(current_dag.definition, body)
            action = "update" if diff else "unchanged"
            changes.append(Change("dag", definition.name, action, body, listed.id, diff))
    if prune:
        named = {(d.kind, d.name) for d in definitions}
        # DAGs the server loads from its own files (sync_dags) are that command's to manage.
        for dag in dags.values():
            if ("dag", dag.name) not in named and dag.source == "api":
                changes.append(Change("dag", dag.name, "delete", object_id=dag.id))
        for task in tasks.values():
            if ("task", task.name) not in named:
                changes.append(Change("task", task.name, "delete", object_id=task.id))
    return plan_sorted(changes)


def plan_sorted(changes: list[Change]) -> Plan:
    """Creates and updates (tasks, then DAGs), then deletes (DAGs, then the tasks they used)."""
    order = {("task", "create"): 0, ("task", "update"): 0, ("dag", "create"): 1}
    order |= {("dag", "update"): 1, ("dag", "delete"): 2, ("task", "delete"): 3}
    return Plan(sorted(changes, key=lambda c: order.get((c.kind, c.action), 0)))


def plan_execute(client: Any, plan: Plan, *, progress: Any = None) -> Plan:
    for change in plan.changes:
        if change.action == "create" and change.body is not None:
            created = (
                client.task_create(change.body)
                if change.kind == "task"
                else client.dag_create(change.body)
            )
            change.result_id = created.id
        elif change.action == "update" and change.body is not None and change.object_id:
            if change.kind == "task":
                client.task_update(change.object_id, change.body)
            else:
                client.dag_update(change.object_id, change.body)
        elif change.action == "delete" and change.object_id:
            if change.kind == "task":
                client.task_delete(change.object_id)
            else:
                client.dag_delete(change.object_id)
        if progress is not None:
            progress(change)
    return plan
