"""Typed response models, written by hand rather than generated from `/api/schema/`.

Why by hand: the DAG endpoints take and return the definition as a free-form object (the
schema types it `object`), so a generated client would type the part that matters most as
`dict` anyway; a generator (openapi-python-client) brings attrs and httpx with it and
regenerates hundreds of lines on every schema change; and these models must tolerate fields
a newer server adds. Each model keeps the fields a client reads, typed, and the whole answer
in `raw` (what `-o json` prints), so nothing the server sent is lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

Model = TypeVar("Model", bound="ApiModel")


@dataclass(frozen=True)
class ApiModel:
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_api(cls: type[Model], data: dict[str, Any]) -> Model:
        known = {f.name for f in fields(cls)} - {"raw"}
        return cls(raw=data, **{name: data.get(name) for name in known})


@dataclass(frozen=True)
class TaskInfo(ApiModel):
    id: str
    name: str
    description: str
    schedule: dict[str, Any]
    handler: dict[str, Any]
    timeout_seconds: int | None
    retry_policy: dict[str, Any]
    policy: dict[str, Any]
    priority: int
    parameters: dict[str, Any]
    tags: list[str]
    notifications: dict[str, Any]
    enabled: bool
    paused: bool
    next_fire_at: str | None
    last_fired_at: str | None
    created_at: str | None
    updated_at: str | None
    # The pause record (empty while it runs) and the runbook's owner and failure count.
    paused_at: str | None
    paused_by: str | None
    pause_note: str | None
    owner: str | None
    consecutive_failures: int | None


@dataclass(frozen=True)
class DagInfo(ApiModel):
    id: str
    name: str
    description: str
    version: int
    schedule: dict[str, Any]
    failure_policy: str
    max_active_runs: int
    catchup: str
    overlap: str
    enabled: bool
    paused: bool
    source: str
    next_fire_at: str | None
    last_fired_at: str | None
    created_at: str | None
    updated_at: str | None
    # The current version's normalized definition: present on `GET dags/{id}`, None in lists.
    definition: dict[str, Any] | None
    paused_at: str | None
    paused_by: str | None
    pause_note: str | None
    owner: str | None
    consecutive_failures: int | None


@dataclass(frozen=True)
class Execution(ApiModel):
    id: str
    task_id: str
    task_name: str
    status: str
    trigger: str
    priority: int
    queue: str
    scheduled_at: str | None
    queued_at: str | None
    started_at: str | None
    completed_at: str | None
    attempt: int
    max_attempts: int
    worker_id: str | None
    parameters: dict[str, Any] | None
    result: Any
    exit_code: int | None
    error_message: str | None
    error_class: str | None
    dead_lettered: bool
    duration_seconds: float | None


@dataclass(frozen=True)
class DagRun(ApiModel):
    id: str
    dag_id: str
    version: int
    status: str
    trigger: str
    scheduled_at: str | None
    parameters: dict[str, Any] | None
    started_at: str | None
    completed_at: str | None
    created_at: str | None
    # Every node's state, on the run detail only.
    nodes: list[dict[str, Any]] | None


@dataclass(frozen=True)
class Triggered(ApiModel):
    """`POST tasks/{id}/trigger`: the new execution, or the one a singleton's or a debounce's
    key already had (`joined`: "singleton" or "debounce"; "" for a new run)."""

    execution_id: str
    status: str
    joined: str | None = None
    trigger_count: int | None = None
    scheduled_at: str | None = None


@dataclass(frozen=True)
class LogLine:
    """One line of a run's output from the live stream; `event_id` resumes the stream."""

    text: str
    event_id: str | None = None


@dataclass(frozen=True)
class LogEnd:
    """The stream's last event: the run's final status."""

    status: str


# Statuses after which an execution or a DAG run never changes again.
TERMINAL_STATUSES = frozenset(
    {
        "success",
        "failed",
        "timed_out",
        "cancelled",
        "skipped",
        "partially_completed",
        "upstream_failed",
    }
)
