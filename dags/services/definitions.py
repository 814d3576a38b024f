"""Writes to DAG definitions: create, new version, delete, pause/resume.

Everything is validated before anything is saved: the graph (dags.spec), then every
node's handler, timeout, retry policy and priority exactly as for a standalone task.
An inline node runs as a hidden manual TaskDefinition (`dag:<dag>/<node>`), so the
worker, retries and dead-lettering treat it like any task.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from budgets.documents import DocumentError, stored_size_check
from dags.models import Dag, DagVersion
from dags.services.approval_checks import approval_nodes_check
from dags.services.timer_checks import timers_check
from dags.spec import DagSpecError, node_runs_task, parse_dag_spec
from scheduler_app.choices import DAG_NODE_TAG
from scheduler_app.errors import Conflict, TooLarge, ValidationFailed
from scheduler_app.flow_spec import FLOW_FIELDS
from scheduler_app.flow_trigger_spec import FLOW_TRIGGER_KEYS
from scheduler_app.limits import expression_budget
from scheduler_app.models import TaskDefinition, Tenant
from scheduler_app.services.audit import (
    audit_action,
    audit_cascade,
    audit_unchanged,
    changed_fields,
    definition_fields,
)
from scheduler_app.services.pools import pool_names_check
from scheduler_app.services.remaining_runs import spent_limit_cleared
from scheduler_app.services.task_definitions import task_create
from scheduler_app.services.task_spec import policy_check, task_spec_to_fields
from scheduler_app.task_checks import task_checks_run
from scheduler_app.task_schedule import schedule_of

TASK_KEYS = (
    "handler",
    "timeout_seconds",
    "retry_policy",
    "priority",
    "parameters",
    "idempotency_key",
    *FLOW_FIELDS,
    *FLOW_TRIGGER_KEYS,
)


def _node_task_spec(node: Mapping[str, Any]) -> dict[str, Any]:
    spec = {key: node[key] for key in TASK_KEYS if key in node}
    if isinstance(spec.get("handler"), str):
        spec["handler"] = {"type": "python", "callable": spec["handler"]}
    return spec


def _validated(raw: Any, *, tenant: Tenant) -> tuple[dict[str, Any], dict[str, Any]]:
    """(normalized spec, dag model fields); raises ValidationFailed naming the field, or
    TooLarge for a definition past DEFINITION_MAX_STORED_BYTES (what every read of the DAG
    and every run of it would pay for), checked before the graph work and on the result."""
    _stored_size_check(raw)
    try:
        spec = parse_dag_spec(
            raw,
            max_nodes=settings.DAG_MAX_NODES,
            max_edges=settings.DAG_MAX_EDGES,
            max_map_items=settings.DAG_MAX_MAP_ITEMS,
            budget=expression_budget(),
        )
    except DagSpecError as error:
        raise ValidationFailed(error.message, field=error.field) from error
    _stored_size_check(spec)
    now = timezone.now()
    _retry_policies_check(spec, anchor=now)
    timers_check(spec, tenant=tenant)
    approval_nodes_check(spec, tenant=tenant)
    referenced = _referenced_tasks(
        tenant=tenant, references=[node["task"] for node in spec["tasks"] if "task" in node]
    )
    for index, node in enumerate(spec["tasks"]):
        if not node_runs_task(node):
            continue  # runs nothing: no task to check
        if "task" in node:
            if node["task"] not in referenced:
                field = f"tasks[{index}].task"
                raise ValidationFailed(
                    f"{field}: no task {node['task']!r} in this tenant", field=field
                )
            continue
        try:
            node_fields = task_spec_to_fields(
                _node_task_spec(node),
                anchor=now,
                partial=True,
                allowed_hosts=tenant.webhook_allowed_hosts,
            )
            pool_names_check(tenant_id=tenant.id, fields=node_fields)
        except ValidationFailed as error:
            if isinstance(node["handler"], str) and error.field == "handler.callable":
                error.field = "handler"
            field = f"tasks[{index}].{error.field}" if error.field else f"tasks[{index}]"
            raise ValidationFailed(f"tasks[{index}]: {error.message}", field=field) from error
    # Every mistake of the schedule block at once (ValidationErrors), as for a task.
    schedule = task_spec_to_fields({"schedule": spec["schedule"]}, anchor=now, partial=True)
    fields = {
        **schedule,
        **_policy_fields(
            spec, schedule=schedule, anchor=now, allowed_hosts=tenant.webhook_allowed_hosts
        ),
        "name": spec["dag"],
        "description": spec["description"],
        "failure_policy": spec["failure_policy"],
        "max_active_runs": spec["max_active_runs"],
        "sla_seconds": spec.get("sla_seconds"),
        "owner": spec.get("owner", ""),
        "enabled": spec["enabled"],
    }
    # The owner is checked as a task's is, by the app that owns what it names (alerting:
    # a member or a notification target of this tenant; 400 naming `owner` if not).
    task_checks_run(tenant_id=tenant.id, fields={"owner": fields["owner"]})
    return spec, fields


def _stored_size_check(definition: Any) -> None:
    try:
        stored_size_check(definition, max_bytes=settings.DEFINITION_MAX_STORED_BYTES)
    except DocumentError as error:
        raise TooLarge(error.message) from error


def _policy_fields(
    spec: Mapping[str, Any],
    *,
    schedule: Mapping[str, Any],
    anchor,
    allowed_hosts: Collection[str] = (),
) -> dict[str, Any]:
    """A DAG's scheduling policy is a task's (`policy`: catchup, overlap, jitter_seconds,
    start_at, end_at), validated by the same code with the same messages; a key left out
    takes the task's default (resetting it on a new version, as a whole definition is)."""
    fields: dict[str, Any] = {
        "jitter_seconds": 0,
        "start_at": None,
        "end_at": None,
        "pause_after_failures": None,
        "health_check": None,
        "remaining_runs": None,
    }
    fields.update(
        task_spec_to_fields(
            {"policy": spec.get("policy") or {}},
            anchor=anchor,
            partial=True,
            allowed_hosts=allowed_hosts,
        )
    )
    fields["catchup"], fields["overlap"] = spec["catchup"], spec["overlap"]
    policy_check({**schedule, **fields}, anchor=anchor)
    return fields


def _retry_policies_check(spec: Mapping[str, Any], *, anchor) -> None:
    """The DAG's retry_policy, and a referenced-task node's (which only the `retry` failure
    policy reads), must be valid retry policies; an inline node's is checked as its task's."""
    places = [("retry_policy", spec.get("retry_policy"))] + [
        (f"tasks[{index}].retry_policy", node.get("retry_policy"))
        for index, node in enumerate(spec["tasks"])
        if "task" in node
    ]
    for where, policy in places:
        if policy is None:
            continue
        if not isinstance(policy, Mapping):
            raise ValidationFailed(f"{where} must be an object", field=where)
        try:
            task_spec_to_fields({"retry_policy": policy}, anchor=anchor, partial=True)
        except ValidationFailed as error:
            field = where + (error.field or "").removeprefix("retry_policy")
            raise ValidationFailed(f"{where}: {error.message}", field=field) from error


def _referenced_tasks(*, tenant: Tenant, references: list[str]) -> dict[str, TaskDefinition]:
    """reference (a task's id or name) -> the task, in two queries whatever the node count."""
    if not references:
        return {}
    tasks = TaskDefinition.objects.filter(tenant=tenant, deleted_at__isnull=True)
    ids, names = set(), set()
    for reference in references:
        try:
            ids.add(uuid.UUID(reference))
        except ValueError:
            names.add(reference)
    found: dict[str, TaskDefinition] = {}
    if ids:
        for task in tasks.filter(id__in=ids):
            found[str(task.id)] = task
        # A reference may spell a UUID differently (upper case, no dashes).
        for reference in references:
            try:
                task = found.get(str(uuid.UUID(reference)))
            except ValueError:
                continue
            if task is not None:
                found[reference] = task
    if names:
        for task in tasks.filter(name__in=names):
            found.setdefault(task.name, task)
    return found


def _node_tasks(
    *, dag: Dag, spec: Mapping[str, Any], previous: DagVersion | None
) -> dict[str, str]:
    """node id -> task id. Unchanged inline nodes keep the previous version's task."""

    old_nodes = {n["id"]: n for n in previous.spec["tasks"]} if previous else {}
    old_tasks = previous.node_tasks if previous else {}
    referenced = _referenced_tasks(
        tenant=dag.tenant, references=[node["task"] for node in spec["tasks"] if "task" in node]
    )
    mapping: dict[str, str] = {}
    for index, node in enumerate(spec["tasks"]):
        if not node_runs_task(node):
            # No task: the engine ends it (its event, its approvers, its timer, a timeout).
            continue
        if "task" in node:
            task = referenced.get(node["task"])
            if task is None:  # deleted since it was validated
                field = f"tasks[{index}].task"
                raise ValidationFailed(
                    f"{field}: no task {node['task']!r} in this tenant", field=field
                )
            mapping[node["id"]] = str(task.id)
            continue
        old = old_nodes.get(node["id"])
        unchanged = old is not None and _node_task_spec(old) == _node_task_spec(node)
        if unchanged and node["id"] in old_tasks:
            mapping[node["id"]] = old_tasks[node["id"]]
            continue
        version = previous.number + 1 if previous else 1
        task = task_create(
            tenant=dag.tenant,
            spec={
                **_node_task_spec(node),
                "name": f"dag:{dag.name}/{node['id']}@v{version}-{uuid.uuid4().hex[:6]}"[:255],
                "description": f"node {node['id']!r} of DAG {dag.name!r}",
                "schedule": {"type": "manual"},
                "tags": [DAG_NODE_TAG],
            },
        )
        mapping[node["id"]] = str(task.id)
    return mapping


def _next_fire(dag: Dag, *, now) -> Any:
    if not dag.enabled or dag.paused or dag.deleted_at or dag.schedule_type == "manual":
        return None
    # The task's schedule object, window and jitter included (seeded by the DAG's id).
    return schedule_of(dag).next_after(now)


def _save_version(dag: Dag, spec: dict[str, Any], previous: DagVersion | None) -> DagVersion:
    number = previous.number + 1 if previous else 1
    with audit_cascade():  # the node tasks come with the version: the DAG's entry says it
        node_tasks = _node_tasks(dag=dag, spec=spec, previous=previous)
    version = DagVersion.objects.create(dag=dag, number=number, spec=spec, node_tasks=node_tasks)
    Dag.objects.filter(tenant_id=dag.tenant_id, id=dag.id).update(version=number)
    dag.version = number
    return version


def dag_create(*, tenant: Tenant, raw: Any, source: str = "api") -> Dag:
    spec, fields = _validated(raw, tenant=tenant)
    now = timezone.now()
    try:
        with transaction.atomic():
            dag = Dag(tenant=tenant, source=source, created_at=now, changed_at=now, **fields)
            dag.next_fire_at = _next_fire(dag, now=now)
            dag.save(force_insert=True)
            _save_version(dag, spec, None)
            _audit(dag, "dag.create", after=definition_fields(dag))
    except IntegrityError as error:
        raise Conflict(
            f"a DAG named {fields['name']!r} already exists in this tenant", field="dag"
        ) from error
    return dag


def dag_update(*, dag: Dag, raw: Any) -> Dag:
    """A new version; runs already started keep theirs. Unchanged definitions are a no-op."""
    spec, fields = _validated(raw, tenant=dag.tenant)
    previous = current_version(dag)
    if previous is not None and previous.spec == spec and fields["name"] == dag.name:
        return dag
    now = timezone.now()
    before = {**definition_fields(dag), "version": dag.version}
    try:
        with transaction.atomic():
            for name, value in fields.items():
                setattr(dag, name, value)
            dag.next_fire_at = _next_fire(dag, now=now)
            dag.changed_at = now
            dag.save()
            _save_version(dag, spec, previous)
            changed_before, changed_after = changed_fields(
                before, {**definition_fields(dag), "version": dag.version}
            )
            _audit(dag, "dag.update", before=changed_before, after=changed_after)
    except IntegrityError as error:
        raise Conflict(
            f"a DAG named {fields['name']!r} already exists in this tenant", field="dag"
        ) from error
    return dag


def current_version(dag: Dag) -> DagVersion | None:
    return DagVersion.objects.filter(dag=dag, number=dag.version).first()


def dag_delete(*, dag: Dag, note: str = "") -> None:
    """Soft delete: history stays; it never fires again. Running runs finish. `note`: why
    (kept in the audit log)."""
    now = timezone.now()
    deleted = Dag.objects.filter(
        tenant_id=dag.tenant_id, id=dag.id, deleted_at__isnull=True
    ).update(deleted_at=now, next_fire_at=None, updated_at=now, changed_at=now)
    if not deleted:
        return audit_unchanged()
    _audit(dag, "dag.delete", before={"deleted": False}, after={"deleted": True}, reason=note)


def _audit(dag: Dag, verb: str, **change: Any) -> None:
    audit_action(tenant=dag.tenant, verb=verb, object_type="dag", object_id=dag.id, **change)


def dag_set_paused(*, dag: Dag, paused: bool, note: str = "", paused_by: str = "") -> Dag:
    """Resume recomputes the next fire from now: no burst of fires missed while paused.
    A pause records who and why (as `task_pause`); a resume clears that and the runbook's
    failure count. Pausing a paused DAG keeps the first pause's record."""
    was_paused = dag.paused
    dag.paused = paused
    now = timezone.now()
    dags = Dag.objects.filter(tenant_id=dag.tenant_id, id=dag.id, deleted_at__isnull=True)
    record: dict = {
        "paused_at": None,
        "paused_by": "",
        "pause_note": "",
        "consecutive_failures": 0,
        "remaining_runs": spent_limit_cleared(),
    }
    if paused:
        dags = dags.filter(paused=False)
        record = {"paused_at": now, "paused_by": paused_by, "pause_note": note}
    changed = dags.update(
        paused=paused,
        next_fire_at=_next_fire(dag, now=now),
        updated_at=now,
        changed_at=now,
        **record,
    )
    dag.refresh_from_db()
    if not changed:
        audit_unchanged()
    else:
        verb = "dag.pause" if paused else "dag.resume"
        change = {"before": {"paused": was_paused}, "after": {"paused": paused}}
        _audit(dag, verb, reason=note if paused else "", **change)
    return dag
