"""A version's graph and node tasks, read once per process: a version is immutable."""

from __future__ import annotations

import functools
import uuid

from dags.graph import Graph, graph_from_spec
from dags.models import DagVersion


@functools.lru_cache(maxsize=512)
def graph_of_version(version_id: uuid.UUID) -> Graph:
    return graph_from_spec(DagVersion.objects.only("spec").get(id=version_id).spec)


@functools.lru_cache(maxsize=512)
def node_tasks_of_version(version_id: uuid.UUID) -> dict[str, str]:
    return DagVersion.objects.only("node_tasks").get(id=version_id).node_tasks
