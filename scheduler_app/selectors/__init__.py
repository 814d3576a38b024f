"""Reads of tenant data. Every function takes the tenant: a view never builds its own queryset.

An id from another tenant is simply not found (404), never forbidden with data.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import DEFAULT_DB_ALIAS
from django.db.models import Count, Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from scheduler_app.ascii_numbers import ascii_int
from scheduler_app.audit_verbs import legacy_actions, verb_of
from scheduler_app.choices import DAG_NODE_TAG, STATUS_SPELLINGS, ExecutionStatus
from scheduler_app.db_router import listing_database
from scheduler_app.errors import NotFound, ValidationFailed
from scheduler_app.models import (
    ApiKey,
    AuditEntry,
    ExecutionLog,
    MemberInvitation,
    Secret,
    TaskDefinition,
    TaskExecution,
    Tenant,
    TenantMembership,
)
from scheduler_app.selectors.log_search import executions_with_log_words

# The largest id a BigAutoField (members) holds.
MAX_BIGINT = 2**63 - 1


def _as_uuid(value: Any, *, what: str) -> uuid.UUID:
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except ValueError as error:
        raise NotFound(f"{what} not found") from error


def task_list(
    *, tenant: Tenant, filters: Mapping[str, str] | None = None, for_listing: bool = False
) -> QuerySet[TaskDefinition]:
    """`for_listing`: a list a person looks at, which may come from the replica (a little
    behind, `scheduler_app.db_router`); never for a read that decides a write."""
    filters = filters or {}
    tasks = TaskDefinition.objects.using(listing_database() if for_listing else DEFAULT_DB_ALIAS)
    tasks = visible_tasks(tasks.filter(tenant=tenant, deleted_at__isnull=True))
    if filters.get("tag"):
        tasks = tasks.filter(tags__contains=[filters["tag"]])
    if filters.get("schedule_type"):
        tasks = tasks.filter(schedule_type=filters["schedule_type"])
    if filters.get("paused") in ("true", "false"):
        tasks = tasks.filter(paused=filters["paused"] == "true")
    if filters.get("search"):
        tasks = tasks.filter(name__icontains=filters["search"])
    return tasks.order_by(*ordering_of(filters, TASK_ORDERINGS, default="name"), "id")


def visible_tasks(tasks: QuerySet[TaskDefinition]) -> QuerySet[TaskDefinition]:
    """Without the hidden tasks that run inline DAG nodes (tagged DAG_NODE_TAG): they are
    reached through their DAG, and would flood task lists (one per node per version)."""
    return tasks.exclude(tags__contains=[DAG_NODE_TAG])


TASK_ORDERINGS = (
    "name",
    "created_at",
    "updated_at",
    "next_fire_at",
    "priority",
)


def ordering_of(filters: Mapping[str, str], allowed: tuple[str, ...], *, default: str) -> list[str]:
    """`?ordering=-created_at,name` restricted to `allowed` fields; a bad one is a 400."""

    raw = filters.get("ordering") or default
    fields = [part.strip() for part in raw.split(",") if part.strip()]
    for field in fields:
        if field.removeprefix("-") not in allowed:
            raise ValidationFailed(
                f"cannot order by {field!r}; allowed: {', '.join(allowed)} (prefix - to reverse)",
                field="ordering",
            )
    return fields


def task_get(*, tenant: Tenant, task_id: Any) -> TaskDefinition:
    task = TaskDefinition.objects.filter(
        tenant=tenant, id=_as_uuid(task_id, what="task"), deleted_at__isnull=True
    ).first()
    if task is None:
        raise NotFound("task not found")
    return task


def execution_list_for_task(*, tenant: Tenant, task: TaskDefinition) -> QuerySet[TaskExecution]:
    return TaskExecution.objects.filter(tenant=tenant, task=task).order_by(
        "-scheduled_at", "-attempt"
    )


def execution_get(*, tenant: Tenant, execution_id: Any) -> TaskExecution:
    execution = (
        TaskExecution.objects.select_related("task")
        .filter(tenant=tenant, id=_as_uuid(execution_id, what="execution"))
        .first()
    )
    if execution is None:
        raise NotFound("execution not found")
    return execution


def execution_log_get(*, tenant: Tenant, execution: TaskExecution) -> ExecutionLog | None:
    return ExecutionLog.objects.filter(tenant=tenant, execution_id=execution.id).first()


# The dead-letter queue's filters (the API's query, the dashboard's form, retry-all's scope).
DEAD_LETTER_FILTERS = ("task", "error", "since")
MAX_FILTER_TEXT = 200


def dead_letter_list(
    *, tenant: Tenant | None, filters: Mapping[str, str] | None = None
) -> QuerySet[TaskExecution]:
    """The tenant's dead letters (tenant None: every tenant's, for platform staff only),
    narrowed by `filters`: `task` (its id, or words of its name), `error` (words of the error
    class or message), `since` (dead-lettered at or after, ISO 8601 with an offset)."""
    executions = (
        TaskExecution.objects.for_tenant_or_platform(tenant)
        .select_related("task")
        .filter(dead_lettered=True)
    )
    filters = filters or {}
    for name in DEAD_LETTER_FILTERS:
        if len(filters.get(name) or "") > MAX_FILTER_TEXT:
            raise ValidationFailed(
                f"{name} is longer than {MAX_FILTER_TEXT} characters", field=name
            )
    if task := (filters.get("task") or "").strip():
        try:
            executions = executions.filter(task_id=uuid.UUID(task))
        except ValueError:
            executions = executions.filter(task__name__icontains=task)
    if error := (filters.get("error") or "").strip():
        executions = executions.filter(
            Q(error_message__icontains=error) | Q(error_class__icontains=error)
        )
    if since := (filters.get("since") or "").strip():
        executions = executions.filter(dead_lettered_at__gte=_parse_instant(since, field="since"))
    return executions.order_by("-completed_at")


def running_by_worker(*, tenant: Tenant, limit: int = 500) -> dict[str, list[TaskExecution]]:
    """This tenant's running executions, grouped by the worker running them: what a tenant
    member may see of the fleet (the fleet itself is platform staff's)."""

    runs = (
        TaskExecution.objects.filter(tenant=tenant, status=ExecutionStatus.RUNNING)
        .select_related("task")
        .only("id", "worker_id", "started_at", "attempt", "task__name")
        .order_by("worker_id", "started_at")[:limit]
    )
    grouped: dict[str, list[TaskExecution]] = {}
    for run in runs:
        grouped.setdefault(run.worker_id or "(unassigned)", []).append(run)
    return grouped


def dead_letter_get(*, tenant: Tenant, execution_id: Any) -> TaskExecution:
    if tenant is None:
        raise NotFound("dead-lettered execution not found")
    execution = (
        dead_letter_list(tenant=tenant)
        .filter(id=_as_uuid(execution_id, what="dead-lettered execution"))
        .first()
    )
    if execution is None:
        raise NotFound("dead-lettered execution not found")
    return execution


# -- executions across tasks, audit, secrets, keys, members ------------------------------
EXECUTION_ORDERINGS = ("scheduled_at", "-scheduled_at", "created_at", "-created_at")


def _parse_instant(value: str, *, field: str):
    parsed = None
    try:
        parsed = parse_datetime(value)
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise ValidationFailed(
            f"{field} must be an ISO 8601 date-time with a UTC offset", field=field
        )
    return parsed


def execution_list(
    *,
    tenant: Tenant,
    filters: Mapping[str, str] | None = None,
    log_window: tuple[str, datetime] | None = None,
    for_listing: bool = False,
) -> QuerySet[TaskExecution]:
    """Every execution of the tenant; filters: status (comma list), task, tag, since, until,
    log_contains (words in the stored log, `scheduler_app.selectors.log_search`). A log
    search may be narrowed to a recent window, (field, start): runs whose `field` (scheduled_at or
    created_at) is at or after start, their logs looked up in that window's part of the index.
    `for_listing`: as `task_list`'s (not with a log search: its budget is the primary's)."""

    filters = filters or {}
    database = listing_database() if for_listing and "log_contains" not in filters else None
    executions = TaskExecution.objects.using(database or DEFAULT_DB_ALIAS)
    executions = executions.select_related("task").filter(tenant=tenant)
    if filters.get("status"):
        wanted = [value.strip() for value in filters["status"].split(",") if value.strip()]
        wanted = [STATUS_SPELLINGS.get(value, value) for value in wanted]
        unknown = [value for value in wanted if value not in ExecutionStatus.values]
        if unknown:
            raise ValidationFailed(
                f"unknown status {unknown[0]!r}; one of {', '.join(ExecutionStatus.values)}",
                field="status",
            )
        executions = executions.filter(status__in=wanted)
    if filters.get("task"):
        try:
            task_id = uuid.UUID(filters["task"])
        except ValueError as error:
            raise ValidationFailed("task must be a task id (UUID)", field="task") from error
        executions = executions.filter(task_id=task_id)
    if filters.get("tag"):
        tag = filters["tag"]
        executions = executions.filter(task__tags__contains=[tag])
    if filters.get("since"):
        executions = executions.filter(
            scheduled_at__gte=_parse_instant(filters["since"], field="since")
        )
    if filters.get("until"):
        executions = executions.filter(
            scheduled_at__lt=_parse_instant(filters["until"], field="until")
        )
    if filters.get("dead_lettered") in ("true", "false"):
        executions = executions.filter(dead_lettered=filters["dead_lettered"] == "true")
    if "log_contains" in filters:
        field, start = log_window or (None, None)
        if field is not None:
            executions = executions.filter(**{f"{field}__gte": start})
        executions = executions.filter(
            id__in=executions_with_log_words(
                tenant=tenant, words=filters["log_contains"], runs_since=start
            )
        )
    return executions


def audit_list(*, tenant: Tenant | None, filters: Mapping[str, str] | None = None):
    """The tenant's audit entries (tenant None: every tenant's, for platform staff)."""

    filters = filters or {}
    entries = AuditEntry.objects.for_tenant_or_platform(tenant)
    for field in ("action", "actor", "object_type", "object_id"):
        if filters.get(field):
            entries = entries.filter(**{field: filters[field]})
    if filters.get("verb"):  # "task.pause": new entries and the old spelling ("task-pause.post")
        verb = verb_of(str(filters["verb"]).strip())
        entries = entries.filter(action__in=[verb, *legacy_actions(verb)])
    return entries.order_by("-id")


def secret_list(*, tenant: Tenant):
    return Secret.objects.filter(tenant=tenant).order_by("name")


def secret_get(*, tenant: Tenant, secret_id: Any):
    secret = secret_list(tenant=tenant).filter(id=_as_uuid(secret_id, what="secret")).first()
    if secret is None:
        raise NotFound("secret not found")
    return secret


def api_key_list(*, tenant: Tenant):
    return ApiKey.objects.filter(tenant=tenant).order_by("-created_at")


def api_key_get(*, tenant: Tenant, key_id: Any):
    key = api_key_list(tenant=tenant).filter(id=_as_uuid(key_id, what="API key")).first()
    if key is None:
        raise NotFound("API key not found")
    return key


def member_list(*, tenant: Tenant):
    return TenantMembership.objects.select_related("user").filter(tenant=tenant).order_by("id")


def invitation_list(*, tenant: Tenant):
    """The tenant's invitations, newest first, whatever their state (never their tokens:
    only a hash is stored)."""
    return (
        MemberInvitation.objects.filter(tenant=tenant)
        .select_related("tenant", "accepted_by")
        .order_by("-created_at")
    )


def invitation_get(*, tenant: Tenant, invitation_id: Any):
    wanted = _as_uuid(invitation_id, what="invitation")
    invitation = invitation_list(tenant=tenant).filter(id=wanted).first()
    if invitation is None:
        raise NotFound("invitation not found")
    return invitation


def member_get(*, tenant: Tenant, member_id: Any):
    wanted = ascii_int(str(member_id), low=1, high=MAX_BIGINT)
    if wanted is None:
        raise ValidationFailed("member_id must be a member's number", field="member_id")
    member = member_list(tenant=tenant).filter(id=wanted).first()
    if member is None:
        raise NotFound("member not found")
    return member


def execution_metrics(*, tenant: Tenant | None, since) -> dict[str, Any]:
    """Counts by status since `since`, success rate of finished runs, and queue depth now.

    tenant None: every tenant (platform staff only; the view decides who may ask).
    """

    executions = TaskExecution.objects.for_tenant_or_platform(tenant)
    counts = dict.fromkeys(ExecutionStatus.values, 0)
    for row in (
        executions.filter(scheduled_at__gte=since).values("status").annotate(total=Count("id"))
    ):
        counts[row["status"]] = row["total"]
    finished = counts["success"] + counts["failed"] + counts["timed_out"]
    now = timezone.now()
    depth = dict.fromkeys(("critical", "normal", "bulk"), 0)
    for row in (
        executions.filter(status__in=["pending", "queued"], scheduled_at__lte=now)
        .values("queue")
        .annotate(total=Count("id"))
    ):
        depth[row["queue"]] = depth.get(row["queue"], 0) + row["total"]
    return {
        "since": since,
        "counts_by_status": counts,
        "success_rate": round(counts["success"] / finished, 4) if finished else None,
        "queue_depth": {"total": sum(depth.values()), "by_tier": depth},
        "running": executions.filter(status="running").count(),
        "dead_letters": executions.filter(dead_lettered=True).count(),
    }


def owner_among(*, kind: str, object_id: Any, tenant_ids: list[int]) -> int | None:
    """Which of `tenant_ids` holds the task or execution `object_id` (None: none of them).
    Asked only for the tenants a user belongs to, so it reveals nothing beyond them."""
    try:
        wanted = _as_uuid(object_id, what=kind)
    except NotFound:
        return None
    if kind == "task":
        rows = TaskDefinition.objects.filter(deleted_at__isnull=True)
    elif kind == "execution":
        rows = TaskExecution.objects.all()
    else:
        raise ValueError(kind)
    return (
        rows.filter(id=wanted, tenant_id__in=tenant_ids).values_list("tenant_id", flat=True).first()
    )
