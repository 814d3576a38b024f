"""A version's graph and node tasks, read once per process: a version is immutable; and the
dispatch fields of those tasks, an inline node's read once per process too."""

from __future__ import annotations

import functools
import uuid

from dags.graph import Graph, graph_from_spec
from dags.models import DagVersion
from scheduler_app.choices import DAG_NODE_TAG
from scheduler_app.models import TaskDefinition


@functools.lru_cache(maxsize=512)
def graph_of_version(version_id: uuid.UUID) -> Graph:
    return graph_from_spec(DagVersion.objects.only("spec").get(id=version_id).spec)


@functools.lru_cache(maxsize=512)
def node_tasks_of_version(version_id: uuid.UUID) -> dict[str, str]:
    return DagVersion.objects.only("node_tasks").get(id=version_id).node_tasks


# What dispatch (`dags.engine.dispatch`) reads of a task (its queue comes from its priority
# and capability), and its tags; a field left out of `.only()` would be loaded by a query of
# its own, per task.
_DISPATCH_FIELDS = ("id", "tenant_id", "priority", "max_attempts", "capability", "tags")
# A singleton or debounced inline node also reads its block (`dags.engine.flow_starts`).
_DISPATCH_FIELDS += ("singleton", "debounce")
# The tasks of inline nodes, by id: made with their DAG's version and never changed (the API
# and the admin refuse to edit a task tagged DAG_NODE_TAG), so each process reads one once.
# A node that names a task of the tenant's own reads it at every dispatch: it may change.
_INLINE_TASKS: dict[str, TaskDefinition] = {}
_INLINE_TASKS_MAX = 4096


def dispatch_tasks(task_ids: set[str], *, version_id: uuid.UUID) -> dict[str, TaskDefinition]:
    """task id -> the dispatch fields of the task; a query only for what this process has
    not cached (every task a node names, and inline tasks it has not seen). That query reads
    every task of the version not cached yet, so a run of a chain reads its tasks once."""
    found = {task_id: _INLINE_TASKS[task_id] for task_id in task_ids if task_id in _INLINE_TASKS}
    missing = task_ids - found.keys()
    if missing:
        ahead = set(node_tasks_of_version(version_id).values()) - _INLINE_TASKS.keys()
        for task in TaskDefinition.platform.filter(id__in=missing | ahead).only(*_DISPATCH_FIELDS):
            if str(task.id) in missing:
                found[str(task.id)] = task
            if DAG_NODE_TAG in (task.tags or []):
                if len(_INLINE_TASKS) >= _INLINE_TASKS_MAX:
                    _INLINE_TASKS.clear()
                _INLINE_TASKS[str(task.id)] = task
    return found
