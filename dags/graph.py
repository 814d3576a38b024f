"""A version's graph, derived once from its immutable spec and cached per process."""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass, field
from typing import Any

from dags.models import DagVersion
from dags.spec import ancestors


@dataclass(frozen=True)
class Graph:
    nodes: dict[str, dict[str, Any]]
    downstream: dict[str, tuple[str, ...]]
    failure_policy: str
    # The definition's `parameters`: defaults for every node of every run.
    parameters: dict[str, Any]
    # The definition's `retry_policy` (read by the `retry` failure policy).
    retry_policy: dict[str, Any] = field(default_factory=dict)

    def ancestors(self, node_id: str) -> set[str]:
        return ancestors(self.nodes, node_id)

    def descendants(self, node_ids: set[str]) -> set[str]:
        seen: set[str] = set()
        todo = list(node_ids)
        while todo:
            for child in self.downstream[todo.pop()]:
                if child not in seen:
                    seen.add(child)
                    todo.append(child)
        return seen


def graph_from_spec(spec: dict[str, Any]) -> Graph:
    nodes = {node["id"]: node for node in spec["tasks"]}
    downstream: dict[str, list[str]] = {node_id: [] for node_id in nodes}
    for node in nodes.values():
        for dependency in node["depends_on"]:
            downstream[dependency].append(node["id"])
    return Graph(
        nodes=nodes,
        downstream={k: tuple(v) for k, v in downstream.items()},
        failure_policy=spec["failure_policy"],
        parameters=dict(spec.get("parameters") or {}),
        retry_policy=dict(spec.get("retry_policy") or {}),
    )


@functools.lru_cache(maxsize=512)
def graph_of_version(version_id: uuid.UUID) -> Graph:
    return graph_from_spec(DagVersion.objects.only("spec").get(id=version_id).spec)


@functools.lru_cache(maxsize=512)
def node_tasks_of_version(version_id: uuid.UUID) -> dict[str, str]:
    return DagVersion.objects.only("node_tasks").get(id=version_id).node_tasks
