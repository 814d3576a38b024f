"""Re-run an ended run: the same task again, with the run's parameters or edited ones.

Unlike a retry (which continues a failed fire's chain with the task's retry budget), a re-run
is a new run, as a manual trigger is (trigger `rerun`, its own chain, the parameters validated,
size-capped and charged the same way, the tenant's run quotas applied when a worker claims it),
that points back at the run it re-ran (`retry_of_id`, the API's `rerun_of`). Any ended run may
be re-run, a succeeded one too (Airflow's "clear", Dagster's "re-execute"); a run still waiting
or running may not: there would be two of it at once.

A DAG node's run is its run's to re-run: a lone re-run would run the node outside it, so it is
refused with a pointer to clearing the node in its DAG run (`dags.services.node_actions`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction

from dags.selectors import dag_node_of_execution
from scheduler_app.choices import TERMINAL_STATUSES, Trigger
from scheduler_app.errors import Conflict, NotFound
from scheduler_app.models import TaskExecution
from scheduler_app.services.audit import audit_record
from scheduler_app.services.task_definitions import task_trigger

MAX_NOTE = 2000


def execution_rerun(
    *,
    execution: TaskExecution,
    parameters: Mapping[str, Any] | None = None,
    note: str = "",
    actor: str = "",
) -> TaskExecution:
    """A new run of `execution`'s task with `parameters` (None: the run's own), audited with
    `note`. Conflict while the run has not ended, or when it is a DAG node's."""
    if execution.status not in TERMINAL_STATUSES:
        raise Conflict(
            f"the run is still {execution.status}: only a run that has ended can be re-run "
            "(cancel it first to re-run it now)",
            field="status",
        )
    link = dag_node_of_execution(tenant=execution.tenant, execution=execution)
    if link is not None:
        raise Conflict(
            f"this run is node {link.node_id!r} of DAG run {link.run_id}: clear the node in its "
            "DAG run to run it again",
            field="execution",
        )
    task = execution.task
    if task.deleted_at is not None:
        raise NotFound("task not found")
    given = execution.parameters if parameters is None else parameters
    with transaction.atomic():
        rerun = task_trigger(
            task=task, parameters=given, trigger=Trigger.RERUN, rerun_of=execution.id
        )
        audit_record(
            tenant=execution.tenant,
            actor=actor,
            action="execution.rerun",
            object_type="execution",
            object_id=str(execution.id),
            detail={
                "rerun_id": str(rerun.id),
                "task_id": str(task.id),
                "task_name": task.name,
                "was": execution.status,
                "parameters_edited": parameters is not None
                and dict(parameters) != (execution.parameters or {}),
            },
            reason=note.strip()[:MAX_NOTE],
        )
    return rerun
