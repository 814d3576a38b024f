"""Parse and validate a DAG definition (pure Python: no Django), graph checks included.

Returns a normalized dict; every error names the field in the definition's own terms
(`tasks[2].depends_on`) and a cycle error lists the cycle (`a -> b -> c -> a`).

Linear in nodes plus edges, and capped (`max_nodes`, `max_edges`; the API passes the
DAG_MAX_NODES and DAG_MAX_EDGES settings): a definition is input from a tenant, and a
1 MiB body can hold 150,000 edges. Reachability (for conditions and `map_over`) is computed
once, in topological order, and only when some node asks for it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from budgets.limits import DEFAULT_BUDGET, ExpressionBudget
from dags.graph import find_cycle, topological_order, upstream_bitsets
from dags.spec_approval import APPROVAL_KEYS, approval_node_parse
from dags.spec_conditions import condition_names, condition_parse, map_over_parse
from dags.spec_errors import DagSpecError
from dags.spec_keys import RUNNING_NODE_KEYS
from dags.spec_timers import TIMER_KEYS, TIMER_TYPES, timer_parse
from scheduler_app.flow_spec import FLOW_FIELDS
from scheduler_app.flow_trigger_spec import FLOW_TRIGGER_KEYS

FAILURE_POLICIES = ("skip_downstream", "fail_all", "continue", "retry")
# What a node may say for itself: retry it, whatever the DAG does with a failure after that.
NODE_FAILURE_POLICIES = ("retry",)
TRIGGER_RULES = ("all_success", "all_done", "one_success")
CATCHUP = ("none", "latest", "all")
OVERLAP = ("allow", "skip", "buffer_one", "cancel_other")
NODE_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,99}$")
MAX_NODES = 5000
MAX_EDGES = 50_000
MAX_MAP_ITEMS = 10000
NODE_KEYS = {
    "id",
    "handler",
    "task",
    "depends_on",
    "condition",
    "trigger_rule",
    "map_over",
    "timeout_seconds",
    "retry_policy",
    "priority",
    "parameters",
    "description",
    "idempotency_key",
    "failure_policy",
    "wait_for_event",
    "type",
    *FLOW_FIELDS,  # concurrency, pool, pool_slots, rate_limit: the node's task takes them
    *FLOW_TRIGGER_KEYS,  # singleton, debounce: its starts (dags.engine.flow_starts)
}
# `"type"`: what a node is. A task (the default: a handler or a task reference), or a node
# that runs nothing of the tenant's and waits until the engine ends it. Each waiting type
# names the keys it adds and parses its node in a module of its own.
NODE_TYPES: dict[str, tuple[set[str], Callable[..., dict[str, Any]] | None]] = {
    "task": (set(), None),
    "approval": (
        APPROVAL_KEYS,
        lambda raw, *, where, budget: approval_node_parse(raw, where=where),
    ),
    **dict.fromkeys(TIMER_TYPES, (TIMER_KEYS, timer_parse)),
}

DAG_KEYS = {
    "dag",
    "name",
    "description",
    "schedule",
    "failure_policy",
    "catchup",
    "overlap",
    "policy",
    "max_active_runs",
    "enabled",
    "parameters",
    "tasks",
    "retry_policy",
    "sla_seconds",
    "owner",
}


def _choice(spec: Mapping[str, Any], key: str, allowed: tuple[str, ...], default: str) -> str:
    value = spec.get(key, default)
    if value not in allowed:
        raise DagSpecError(f"{key} must be one of {', '.join(allowed)}", field=key)
    return value


def _node(raw: Any, index: int, *, budget: ExpressionBudget, max_map_items: int) -> dict[str, Any]:
    where = f"tasks[{index}]"
    if not isinstance(raw, Mapping):
        raise DagSpecError(f"{where} must be an object", field=where)
    node_type = raw.get("type")
    if node_type is not None and node_type not in NODE_TYPES:
        raise DagSpecError(
            f"{where}.type must be one of {', '.join(NODE_TYPES)}", field=f"{where}.type"
        )
    type_keys, type_parse = NODE_TYPES[node_type] if node_type is not None else (set(), None)
    unknown = sorted(set(raw) - NODE_KEYS - type_keys)
    owners = [name for name, (keys, _) in NODE_TYPES.items() if unknown and unknown[0] in keys]
    if owners:
        raise DagSpecError(
            f"{where} has keys of a {' or '.join(owners)} node: {', '.join(unknown)}"
            " (set its type)",
            field=f"{where}.{unknown[0]}",
        )
    if unknown:
        raise DagSpecError(f"{where} has unknown keys: {', '.join(unknown)}", field=where)
    node_id = raw.get("id")
    if not isinstance(node_id, str) or not NODE_ID.match(node_id):
        raise DagSpecError(
            f"{where}.id must be letters, digits, '_' or '-' (at most 100)", field=f"{where}.id"
        )
    if type_parse is not None:
        node: dict[str, Any] = {"id": node_id, **type_parse(raw, where=where, budget=budget)}
    elif "wait_for_event" in raw:
        node = {"id": node_id, **_wait_for_event(raw, where=where)}
    elif ("handler" in raw) == ("task" in raw):
        raise DagSpecError(
            f"{where} needs exactly one of 'handler' or 'task' (an existing task's name or id)",
            field=f"{where}.handler",
        )
    elif "handler" in raw:
        node = {"id": node_id}
        # A string is the design document's spelling: the registered handler of that name.
        if isinstance(raw["handler"], str) and raw["handler"]:
            node["handler"] = raw["handler"]
        elif isinstance(raw["handler"], Mapping):
            node["handler"] = dict(raw["handler"])
        else:
            raise DagSpecError(
                f"{where}.handler must be an object or a registered handler's name",
                field=f"{where}.handler",
            )
    else:
        if not isinstance(raw["task"], str) or not raw["task"]:
            raise DagSpecError(f"{where}.task must be a task name or id", field=f"{where}.task")
        node = {"id": node_id, "task": raw["task"]}
    depends_on = raw.get("depends_on") or []
    if isinstance(depends_on, str):
        depends_on = [depends_on]
    if not isinstance(depends_on, list) or not all(isinstance(d, str) for d in depends_on):
        raise DagSpecError(
            f"{where}.depends_on must be a list of node ids", field=f"{where}.depends_on"
        )
    if len(set(depends_on)) != len(depends_on):
        raise DagSpecError(f"{where}.depends_on repeats a node", field=f"{where}.depends_on")
    node["depends_on"] = list(depends_on)
    trigger_rule = raw.get("trigger_rule", "all_success")
    if trigger_rule not in TRIGGER_RULES:
        raise DagSpecError(
            f"{where}.trigger_rule must be one of {', '.join(TRIGGER_RULES)}",
            field=f"{where}.trigger_rule",
        )
    node["trigger_rule"] = trigger_rule
    if raw.get("condition") is not None:
        node["condition"] = condition_parse(
            raw["condition"], field=f"{where}.condition", node_id=node_id, budget=budget
        )
    if raw.get("map_over") is not None:
        node["map_over"] = map_over_parse(
            raw["map_over"],
            field=f"{where}.map_over",
            node_id=node_id,
            budget=budget,
            max_items=max_map_items,
        )
    for key in ("timeout_seconds", "retry_policy", "priority", "description", "idempotency_key"):
        if key in raw:
            node[key] = raw[key]
    flow_given = sorted(key for key in (*FLOW_FIELDS, *FLOW_TRIGGER_KEYS) if key in raw)
    one_run = [key for key in FLOW_TRIGGER_KEYS if raw.get(key) is not None]
    if one_run and raw.get("map_over") is not None:
        raise DagSpecError(
            f"{where}.{one_run[0]} does not apply to a map_over node (its shards are one run)",
            field=f"{where}.{one_run[0]}",
        )
    if flow_given and "task" in node:
        raise DagSpecError(
            f"{where}.{flow_given[0]}: a node that names a task runs under that task's own flow "
            "control; set it on the task, or give the node a handler",
            field=f"{where}.{flow_given[0]}",
        )
    for key in flow_given:
        node[key] = raw[key]  # validated with the node's task (task_spec_to_fields)
    if "parameters" in raw:
        if not isinstance(raw["parameters"], Mapping):
            raise DagSpecError(f"{where}.parameters must be an object", field=f"{where}.parameters")
        node["parameters"] = dict(raw["parameters"])
    node.update(_node_failure_policy(raw, where=where))
    return node


def node_runs_task(node: Mapping[str, Any]) -> bool:
    """Whether a normalized node runs a task (a handler or a named task); a wait or a typed
    node runs nothing, and the engine ends it."""
    return "wait_for_event" not in node and "type" not in node


WAIT_KEYS = {"name", "match", "timeout_seconds"}
# Keys a wait_for_event node may not have: it runs nothing.
NOT_FOR_WAITS = RUNNING_NODE_KEYS
EVENT_NAME = re.compile(r"^[A-Za-z0-9_.:/-]{1,255}$")
MAX_WAIT_SECONDS = 30 * 86400


def _wait_for_event(raw: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    """`{"name", "match": {payload subset}, "timeout_seconds"}`: the node waits, holding no
    worker, for a matching event posted after its run started."""
    field = f"{where}.wait_for_event"
    extra = [key for key in NOT_FOR_WAITS if key in raw]
    if extra:
        raise DagSpecError(
            f"{where} waits for an event and runs nothing: no {', '.join(extra)}",
            field=f"{where}.{extra[0]}",
        )
    wait = raw["wait_for_event"]
    if not isinstance(wait, Mapping) or set(wait) - WAIT_KEYS:
        raise DagSpecError(
            f"{field} must be an object with name, match and timeout_seconds", field=field
        )
    name = wait.get("name")
    if not isinstance(name, str) or not EVENT_NAME.match(name):
        raise DagSpecError(
            f"{field}.name must be 1 to 255 letters, digits or _ . : / -", field=f"{field}.name"
        )
    match = wait.get("match") or {}
    if not isinstance(match, Mapping):
        raise DagSpecError(f"{field}.match must be an object", field=f"{field}.match")
    timeout = wait.get("timeout_seconds", 3600)
    if isinstance(timeout, bool) or not isinstance(timeout, int):
        raise DagSpecError(
            f"{field}.timeout_seconds must be a whole number", field=f"{field}.timeout_seconds"
        )
    if not 1 <= timeout <= MAX_WAIT_SECONDS:
        raise DagSpecError(
            f"{field}.timeout_seconds must be from 1 to {MAX_WAIT_SECONDS}",
            field=f"{field}.timeout_seconds",
        )
    return {"wait_for_event": {"name": name, "match": dict(match), "timeout_seconds": timeout}}


def _node_failure_policy(raw: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    """A node's own `failure_policy` (only `retry`): it is retried under its `retry_policy`
    (or the DAG's) even when the DAG's policy is another one."""
    if "failure_policy" not in raw:
        return {}
    if raw["failure_policy"] not in NODE_FAILURE_POLICIES:
        raise DagSpecError(
            f"{where}.failure_policy must be one of {', '.join(NODE_FAILURE_POLICIES)}",
            field=f"{where}.failure_policy",
        )
    if raw.get("map_over") is not None:
        raise DagSpecError(
            f"{where}.failure_policy retry does not apply to a map_over node",
            field=f"{where}.failure_policy",
        )
    return {"failure_policy": raw["failure_policy"]}


def _dag_owner(raw: Mapping[str, Any]) -> dict[str, Any]:
    """`owner`: who the runbook tells ("user:<name>" or a notification target's name)."""
    owner = raw.get("owner")
    if owner is None:
        return {}
    if not isinstance(owner, str) or len(owner) > 255:
        raise DagSpecError("owner must be text of at most 255 characters", field="owner")
    return {"owner": owner.strip()}


def _dag_sla(raw: Mapping[str, Any]) -> dict[str, Any]:
    """`sla_seconds`: a run not finished that long after its scheduled time is reported."""
    value = raw.get("sla_seconds")
    if value is None:
        return {}
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 30 * 86400:
        raise DagSpecError(
            "sla_seconds must be a whole number from 1 to 2592000", field="sla_seconds"
        )
    return {"sla_seconds": value}


def _dag_retry_policy(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The DAG's `retry_policy` (the `retry` failure policy's, for nodes without their own);
    its values are checked as a task's are, by the service that saves the DAG."""
    policy = raw.get("retry_policy")
    if policy is None:
        return {}
    if not isinstance(policy, Mapping):
        raise DagSpecError("retry_policy must be an object", field="retry_policy")
    return {"retry_policy": dict(policy)}


def _named_upstream(node: Mapping[str, Any], key: str, *, budget: ExpressionBudget) -> str | None:
    """The node a condition (field or JSONPath form) or a `map_over` field reads, if any."""
    if key == "condition":
        return condition_names(node.get(key), budget=budget)
    path = (node.get(key) or {}).get("field")
    return None if path is None else path.split(".")[0]


def _check_upstream_references(
    nodes: dict[str, dict[str, Any]], order: list[str], *, budget: ExpressionBudget
) -> None:
    """A condition or `map_over` may only name a node upstream of its own."""
    wanted = [
        (index, node, key, named)
        for index, node in enumerate(nodes.values())
        for key in ("condition", "map_over")
        if (named := _named_upstream(node, key, budget=budget)) is not None
    ]
    if not wanted:
        return
    edges = {node_id: node["depends_on"] for node_id, node in nodes.items()}
    upstream = upstream_bitsets(edges, order)
    position = {node_id: index for index, node_id in enumerate(order)}
    for index, node, key, named in wanted:
        if named not in position or not (upstream[node["id"]] >> position[named]) & 1:
            raise DagSpecError(
                f"{key} of task {node['id']!r} names {named!r}, which is not upstream of it",
                field=f"tasks[{index}].{key}",
            )


POLICY_TIMES = ("start_at", "end_at")


def _dag_policy(raw: Mapping[str, Any]) -> dict[str, Any]:
    """`catchup`, `overlap` and the optional `policy` object, which is a task's `policy`
    (catchup, overlap, jitter_seconds, start_at, end_at; checked in full by the definitions
    service, with the task's own rules). The top-level catchup/overlap are the older
    spelling of the policy's: both may be given when they agree."""
    policy = raw.get("policy")
    if policy is None:
        return {
            "catchup": _choice(raw, "catchup", CATCHUP, "latest"),
            "overlap": _choice(raw, "overlap", OVERLAP, "allow"),
        }
    if not isinstance(policy, Mapping):
        raise DagSpecError("policy must be an object", field="policy")
    merged = dict(raw)
    for key in ("catchup", "overlap"):
        if key in policy:
            if key in raw and raw[key] != policy[key]:
                raise DagSpecError(
                    f"{key} and policy.{key} differ; give it once", field=f"policy.{key}"
                )
            merged[key] = policy[key]
    normalized = dict(policy)
    for key in POLICY_TIMES:
        # A YAML timestamp arrives as a datetime: kept as its ISO text (the spec is JSON).
        if isinstance(normalized.get(key), datetime):
            normalized[key] = normalized[key].isoformat()
    try:
        return {
            "catchup": _choice(merged, "catchup", CATCHUP, "latest"),
            "overlap": _choice(merged, "overlap", OVERLAP, "allow"),
            "policy": normalized,
        }
    except DagSpecError as error:
        in_policy = error.field in policy
        raise DagSpecError(
            f"policy.{error.message}" if in_policy else error.message,
            field=f"policy.{error.field}" if in_policy else error.field,
        ) from error


def parse_dag_spec(
    raw: Any,
    *,
    max_nodes: int = MAX_NODES,
    max_edges: int = MAX_EDGES,
    max_map_items: int = MAX_MAP_ITEMS,
    budget: ExpressionBudget = DEFAULT_BUDGET,
) -> dict[str, Any]:
    """The normalized definition; DagSpecError naming the field. The caps and the expression
    budget of conditions and `map_over` paths come in as arguments (the API passes the
    installation's settings)."""
    if not isinstance(raw, Mapping):
        raise DagSpecError("a DAG definition must be an object", field=None)
    unknown = sorted(set(raw) - DAG_KEYS)
    if unknown:
        raise DagSpecError(
            f"unknown keys: {', '.join(unknown)}; allowed: {', '.join(sorted(DAG_KEYS))}",
            field=unknown[0],
        )
    name = raw.get("dag", raw.get("name"))
    if not isinstance(name, str) or not name.strip():
        raise DagSpecError("dag (the DAG's name) is required", field="dag")
    tasks = raw.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise DagSpecError("tasks must be a non-empty list", field="tasks")
    if len(tasks) > max_nodes:
        raise DagSpecError(
            f"a DAG has at most {max_nodes} tasks (this one has {len(tasks)})", field="tasks"
        )
    nodes: dict[str, dict[str, Any]] = {}
    edge_count = 0
    for index, raw_node in enumerate(tasks):
        node = _node(raw_node, index, budget=budget, max_map_items=max_map_items)
        if node["id"] in nodes:
            raise DagSpecError(
                f"duplicate task id {node['id']!r} (tasks[{index}])", field=f"tasks[{index}].id"
            )
        edge_count += len(node["depends_on"])
        if edge_count > max_edges:
            raise DagSpecError(
                f"a DAG has at most {max_edges} dependencies in all (depends_on entries); "
                f"tasks[{index}] goes past that",
                field=f"tasks[{index}].depends_on",
            )
        nodes[node["id"]] = node
    for index, node in enumerate(nodes.values()):
        for dependency in node["depends_on"]:
            if dependency not in nodes:
                raise DagSpecError(
                    f"task {node['id']!r} depends on unknown task {dependency!r}",
                    field=f"tasks[{index}].depends_on",
                )
    edges = {node_id: node["depends_on"] for node_id, node in nodes.items()}
    order = topological_order(edges)
    if order is None:
        cycle = find_cycle(edges) or []
        # Edges were followed from a node to its dependency; show them in run order.
        raise DagSpecError(f"cycle: {' -> '.join(reversed(cycle))}", field="tasks")
    _check_upstream_references(nodes, order, budget=budget)
    parameters = raw.get("parameters") or {}
    if not isinstance(parameters, Mapping):
        raise DagSpecError("parameters must be an object", field="parameters")
    max_active_runs = raw.get("max_active_runs", 16)
    if isinstance(max_active_runs, bool) or not isinstance(max_active_runs, int):
        raise DagSpecError("max_active_runs must be an integer", field="max_active_runs")
    if not 1 <= max_active_runs <= 1000:
        raise DagSpecError("max_active_runs must be between 1 and 1000", field="max_active_runs")
    schedule = raw.get("schedule") or {"type": "manual"}
    if not isinstance(schedule, Mapping):
        raise DagSpecError("schedule must be an object", field="schedule")
    return {
        "dag": name.strip(),
        "description": raw.get("description") or "",
        "schedule": dict(schedule),
        "failure_policy": _choice(raw, "failure_policy", FAILURE_POLICIES, "skip_downstream"),
        **_dag_policy(raw),
        "max_active_runs": max_active_runs,
        "enabled": bool(raw.get("enabled", True)),
        "parameters": dict(parameters),
        "tasks": list(nodes.values()),
        **_dag_retry_policy(raw),
        **_dag_sla(raw),
        **_dag_owner(raw),
    }
