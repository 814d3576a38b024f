"""Worst-case DAG definitions for the tests and the input_cost benchmark (no Django)."""

from __future__ import annotations

import json
from typing import Any

ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def short_id(number: int) -> str:
    text = ""
    while True:
        number, digit = divmod(number, len(ALPHABET))
        text = ALPHABET[digit] + text
        if number == 0:
            return "n" + text


def dense_dag(*, nodes: int, body_bytes: int) -> dict[str, Any]:
    """`nodes` tasks in a chain, each also depending on as many earlier ones as fit in
    `body_bytes` of JSON: the most edges a body of that size can carry (the shape that made
    validation quadratic). The last task's condition names the first, so reachability over
    the whole graph must be computed."""
    ids = [short_id(index) for index in range(nodes)]
    handler = {"type": "python", "callable": "noop"}
    tasks: list[dict[str, Any]] = [{"id": node_id, "handler": handler} for node_id in ids]
    for index in range(1, nodes):
        tasks[index]["depends_on"] = [ids[index - 1]]
    tasks[-1]["condition"] = {"field": f"{ids[0]}.status", "equals": "success"}
    budget = body_bytes - len(json.dumps({"dag": "bomb", "tasks": tasks}))
    for index in range(2, nodes):
        if budget <= 0:
            break
        cost = len(ids[index - 2]) + 4  # the id, its quotes, a comma and a space
        extra = min(index - 1, budget // (cost + 1))
        tasks[index]["depends_on"] = ids[index - 1 - extra : index]
        budget -= sum(len(node_id) + 4 for node_id in ids[index - 1 - extra : index - 1])
    return {"dag": "bomb", "tasks": tasks}


def edge_count(definition: dict[str, Any]) -> int:
    return sum(len(task.get("depends_on", [])) for task in definition["tasks"])
