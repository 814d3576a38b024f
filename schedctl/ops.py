"""schedctl's commands on what exists: get, describe, trigger, pause/resume, logs, cancel,
dead letters (backfill: `schedctl.backfills`)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click
import yaml

from schedctl.cli import State, main, pass_state
from schedctl.output import (
    Waiting,
    emit,
    emit_data,
    key,
    output_option,
    schedule_text,
    short_time,
    table,
)
from schedctl.pause_record import state_line, summary
from scheduler_sdk.client import Client
from scheduler_sdk.errors import SchedulerError
from scheduler_sdk.models import TERMINAL_STATUSES, DagInfo, LogEnd, TaskInfo, Triggered

reason_option = click.option(
    "--reason", "--note", "note", default="", help="Why (kept in the audit log)."
)
kind_option = click.option(
    "--kind",
    type=click.Choice(["task", "dag"]),
    help="When a task and a DAG share the name (default: whichever exists).",
)


def resolve(client: Client, name: str, kind: str | None) -> tuple[str, TaskInfo | DagInfo]:
    """A task or a DAG by name (or id)."""
    task = client.task_by_name(name) if kind in (None, "task") else None
    dag = client.dag_by_name(name) if kind in (None, "dag") else None
    if task is not None and dag is not None:
        raise click.UsageError(f"both a task and a DAG are named {name!r}: add --kind task|dag")
    if task is not None:
        return "task", task
    if dag is not None:
        return "dag", dag
    raise SchedulerError(f"no {kind or 'task or DAG'} named {name!r} in this tenant")


def parse_parameters(pairs: tuple[str, ...]) -> dict[str, Any]:
    """`-p k=v`: v is read as JSON when it parses (`n=3` is a number), else as text."""
    parameters: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{pair!r} is not key=value", param_hint="-p")
        try:
            parameters[name] = json.loads(value)
        except ValueError:
            parameters[name] = value
    return parameters


def _seconds(value: float | None, unit: str, *, digits: int = 1) -> str | None:
    return None if value is None else f"{value:.{digits}f}{unit}"


# ---- get ---------------------------------------------------------------------------------

TASK_COLUMNS = [
    ("name", key("name")),
    ("schedule", lambda r: schedule_text(r.get("schedule"))),
    ("handler", lambda r: (r.get("handler") or {}).get("type")),
    ("paused", key("paused")),
    ("next fire", lambda r: short_time(r.get("next_fire_at"))),
    ("last fired", lambda r: short_time(r.get("last_fired_at"))),
]
DAG_COLUMNS = [
    ("name", key("name")),
    ("version", key("version")),
    ("schedule", lambda r: schedule_text(r.get("schedule"))),
    ("paused", key("paused")),
    ("source", key("source")),
    ("next fire", lambda r: short_time(r.get("next_fire_at"))),
]


def waiting_text(waiting_for: dict | None) -> str | None:
    """A pending run's flow-control wait in a cell: "concurrency customer-42 2/2"."""
    if not waiting_for:
        return None
    return (
        f"{waiting_for.get('kind')} {waiting_for.get('key')} "
        f"{waiting_for.get('running')}/{waiting_for.get('max')}"
    )


RUN_COLUMNS = [
    ("id", key("id")),
    ("task", key("task_name")),
    ("status", key("status")),
    ("trigger", key("trigger")),
    ("attempt", lambda r: f"{r.get('attempt')}/{r.get('max_attempts')}"),
    ("scheduled", lambda r: short_time(r.get("scheduled_at"))),
    ("duration", lambda r: _seconds(r.get("duration_seconds"), "s", digits=2)),
    ("waiting for", lambda r: waiting_text(r.get("waiting_for"))),
]
DAG_RUN_COLUMNS = [
    ("id", key("id")),
    ("version", key("version")),
    ("status", key("status")),
    ("trigger", key("trigger")),
    ("started", lambda r: short_time(r.get("started_at"))),
    ("completed", lambda r: short_time(r.get("completed_at"))),
]
DLQ_COLUMNS = [
    ("id", key("id")),
    ("task", key("task_name")),
    ("status", key("status")),
    ("attempt", key("attempt")),
    ("dead-lettered", lambda r: short_time(r.get("dead_lettered_at"))),
    ("error", lambda r: (r.get("error_message") or "")[:60]),
]
WORKER_COLUMNS = [
    ("worker", key("hostname")),
    ("state", key("state")),
    ("queues", key("queues")),
    ("runs", lambda r: f"{r.get('active_runs')}/{r.get('concurrency')}"),
    ("done/min", key("completed_last_minute")),
    ("heartbeat", lambda r: _seconds(r.get("seconds_since_heartbeat"), "s ago")),
]


@main.command()
@click.argument("resource", type=click.Choice(["tasks", "dags", "runs", "workers", "dlq"]))
@click.option("--task", "task_name", help="runs: of this task.")
@click.option("--dag", "dag_name", help="runs: of this DAG.")
@click.option("--status", help="runs: only these statuses (comma list).")
@click.option("--limit", type=click.IntRange(1, 500), default=20, show_default=True)
@output_option
@pass_state
def get(
    state: State,
    resource: str,
    task_name: str | None,
    dag_name: str | None,
    status: str | None,
    limit: int,
    output: str,
) -> None:
    """List tasks, DAGs, runs (newest first), workers (platform staff) or dead letters."""
    client = state.client
    if resource == "tasks":
        emit([t.raw for t in client.tasks()], TASK_COLUMNS, output)
    elif resource == "dags":
        emit([d.raw for d in client.dags()], DAG_COLUMNS, output)
    elif resource == "runs" and dag_name:
        _, dag = resolve(client, dag_name, "dag")
        emit([r.raw for r in client.dag_runs(dag.id, limit=limit)], DAG_RUN_COLUMNS, output)
    elif resource == "runs":
        task_id = resolve(client, task_name, "task")[1].id if task_name else None
        runs = client.executions(status=status, task_id=task_id, limit=limit)
        emit([r.raw for r in runs], RUN_COLUMNS, output)
    elif resource == "workers":
        fleet = client.workers()
        if output != "table":
            emit_data(fleet, output)
        else:
            emit(fleet.get("workers") or [], WORKER_COLUMNS, output)
    else:
        emit([e.raw for e in client.dead_letters()], DLQ_COLUMNS, output)


# ---- describe ----------------------------------------------------------------------------

# Fires looked at for the next skipped ones of a task with calendar exclusions.
SKIP_LOOKAHEAD = 100


def _describe_text(
    kind: str, data: dict[str, Any], recent: list[dict[str, Any]], columns: list
) -> None:
    click.echo(summary(kind, data))
    shown = {k: v for k, v in data.items() if k != "recent_runs"}
    click.echo(yaml.safe_dump(shown, sort_keys=False, allow_unicode=True).rstrip())
    click.echo("recent_runs:")
    click.echo(table(recent, columns) if recent else "  (none)")


@main.command()
@click.argument("kind", type=click.Choice(["task", "dag"]))
@click.argument("name")
@output_option
@pass_state
def describe(state: State, kind: str, name: str, output: str) -> None:
    """A task (with its next fire times and recent runs) or a DAG (definition, recent runs).
    First: whether it runs (paused by whom, when, why), its owner, the failures in a row and
    the runbook policy."""
    client = state.client
    _, found = resolve(client, name, kind)
    data = dict(found.raw)
    if kind == "task":
        excluding = bool((data.get("schedule") or {}).get("exclude"))
        # With exclusions, look further ahead so the next skipped fires show too.
        preview = client.task_schedule_preview(found.id, count=SKIP_LOOKAHEAD if excluding else 5)
        data["upcoming"] = [fire["local"] for fire in preview.get("fire_times", [])][:5]
        if excluding:
            data["exclusions"] = data["schedule"]["exclude"]
            data["next_skipped"] = [
                {"at": entry["local"], "reason": entry["reason"]}
                for entry in preview.get("timeline", [])
                if entry.get("skipped")
            ][:5]
        recent = [r.raw for r in client.task_executions(found.id, limit=5)]
        columns = RUN_COLUMNS
    else:
        recent = [r.raw for r in client.dag_runs(found.id, limit=5)]
        columns = DAG_RUN_COLUMNS
    data["recent_runs"] = recent
    if output != "table":
        emit_data(data, output)
    else:
        _describe_text(kind, data, recent, columns)


# ---- trigger, pause, resume --------------------------------------------------------------


def _joined_note(triggered: Triggered) -> str:
    """What a singleton's or a debounce's trigger did, after the run id: the run is not new."""
    count = triggered.trigger_count or 1
    if triggered.joined == "singleton":
        return f" (singleton: already {triggered.status}, not a new run; {count} triggers)"
    if triggered.joined == "debounce":
        return (
            f" (debounced into the pending run: {count} triggers, the last one's parameters; "
            f"starts {triggered.scheduled_at} unless triggered again)"
        )
    if triggered.status == "pending" and triggered.scheduled_at:
        return f" (debounced: starts {triggered.scheduled_at} unless triggered again)"
    return ""


def _wait_for(client: Client, kind: str, object_id: str, run_id: str) -> str:
    status = "queued"

    def message() -> str:
        return f"waiting for run {run_id} ({status})"

    with Waiting(message):
        while status not in TERMINAL_STATUSES:
            time.sleep(1.0)
            run = client.execution(run_id) if kind == "task" else client.dag_run(object_id, run_id)
            status = run.status
    return status


@main.command()
@click.argument("name")
@click.option("-p", "--param", "params", multiple=True, help="key=value (repeatable; JSON values).")
@click.option("--wait", is_flag=True, help="Wait for the run to end; exit 1 unless it succeeded.")
@kind_option
@output_option
@pass_state
def trigger(
    state: State, name: str, params: tuple[str, ...], wait: bool, kind: str | None, output: str
) -> None:
    """Run a task or a DAG now; prints the new run's id."""
    client = state.client
    parameters = parse_parameters(params)
    kind, found = resolve(client, name, kind)
    note = ""
    if kind == "task":
        triggered = client.task_trigger(found.id, parameters)
        run_id, data = triggered.execution_id, triggered.raw
        note = _joined_note(triggered)
    else:
        run = client.dag_trigger(found.id, parameters)
        run_id, data = run.id, run.raw
    if output != "table":
        emit_data(data, output)
    else:
        click.echo(f"triggered {kind} {name}: run {run_id}{note}")
    if wait:
        status = _wait_for(client, kind, found.id, run_id)
        click.echo(f"run {run_id} ended: {status}", err=True)
        sys.exit(0 if status == "success" else 1)


def _pause_or_resume(
    state: State, name: str, kind: str | None, *, pause: bool, note: str = ""
) -> None:
    client = state.client
    kind, found = resolve(client, name, kind)
    if kind == "task":
        done = client.task_pause(found.id, note) if pause else client.task_resume(found.id)
    else:
        done = client.dag_pause(found.id, note) if pause else client.dag_resume(found.id)
    if pause:
        click.echo(f"{kind} {name} {state_line(done.raw)}")
        return
    when = f", next fire {short_time(done.next_fire_at)}" if done.next_fire_at else ""
    click.echo(f"{kind} {name} resumed{when}")


@main.command()
@click.argument("name")
@click.option(
    "--note", "--reason", "note", default="", help="Why (kept with the pause and audited)."
)
@kind_option
@pass_state
def pause(state: State, name: str, note: str, kind: str | None) -> None:
    """Stop firing a task's or a DAG's schedule (the definition stays); the pause records
    who paused it, when, and the note."""
    _pause_or_resume(state, name, kind, pause=True, note=note)


@main.command()
@click.argument("name")
@kind_option
@pass_state
def resume(state: State, name: str, kind: str | None) -> None:
    """Fire again, from now on (no burst of the fires missed while paused)."""
    _pause_or_resume(state, name, kind, pause=False)


# ---- logs and cancel ---------------------------------------------------------------------


@main.command()
@click.argument("run_id")
@click.option("-f", "--follow", is_flag=True, help="Follow the output live until the run ends.")
@pass_state
def logs(state: State, run_id: str, follow: bool) -> None:
    """A run's output. With -f, follows it live and exits when the run ends: 0 if it
    succeeded, 1 if not (so a script can wait on a run)."""
    client = state.client
    if not follow:
        click.echo(client.logs(run_id), nl=False)
        return
    status = "queued"
    waiting = Waiting(lambda: f"waiting for output of run {run_id}")
    with waiting:
        for event in client.follow_logs(run_id):
            waiting.stop()
            if isinstance(event, LogEnd):
                status = event.status
                break
            click.echo(event.text)
    click.echo(f"run {run_id} ended: {status}", err=True)
    sys.exit(0 if status == "success" else 1)


@main.command()
@click.argument("run_id")
@click.option("--dag", "dag_name", help="The run is a run of this DAG (else: a task's run).")
@reason_option
@pass_state
def cancel(state: State, run_id: str, dag_name: str | None, note: str) -> None:
    """Cancel a run: a waiting one never starts, a running one is killed."""
    client = state.client
    if dag_name:
        _, dag = resolve(client, dag_name, "dag")
        run = client.dag_run_cancel(dag.id, run_id, note)
        click.echo(f"DAG run {run_id}: {run.status}")
        return
    answer = client.execution_cancel(run_id, note)
    click.echo(f"run {run_id}: {answer.get('status')}")


@main.command()
@click.argument("execution_id")
@click.option(
    "-p", "--param", "params", multiple=True, help="key=value: replaces the run's parameters."
)
@click.option("--note", default="", help="Why (kept in the audit log).")
@pass_state
def rerun(state: State, execution_id: str, params: tuple[str, ...], note: str) -> None:
    """Run an ended run again: with its own parameters, or those given with -p."""
    answer = state.client.execution_rerun(
        execution_id, parse_parameters(params) if params else None, note
    )
    click.echo(f"re-running {execution_id}: new run {answer.get('execution_id')}")


# ---- dead letters ------------------------------------------------------------------------


@main.group()
def dlq() -> None:
    """The dead-letter queue (list it with `schedctl get dlq`)."""


@dlq.command("retry")
@click.argument("execution_id", required=False)
@click.option("--all", "retry_all", is_flag=True, help="Retry every dead letter of the tenant.")
@click.option("--task", help="--all: only runs of tasks whose name has this (or this task id).")
@click.option("--error", help="--all: only runs whose error class or message has this.")
@click.option("--since", help="--all: only runs dead-lettered since (ISO 8601 with offset).")
@pass_state
def dlq_retry(
    state: State,
    execution_id: str | None,
    retry_all: bool,
    task: str | None,
    error: str | None,
    since: str | None,
) -> None:
    """Retry one dead-lettered run (ID), or all of them (--all), or all the filters match."""
    if bool(execution_id) == retry_all:
        raise click.UsageError("give one ID or --all")
    filters = {k: v for k, v in {"task": task, "error": error, "since": since}.items() if v}
    if filters and not retry_all:
        raise click.UsageError("--task, --error and --since go with --all")
    client = state.client
    if retry_all:
        answer = client.dead_letters_retry_all(filters)
        click.echo(f"retried {answer.get('retried')} dead letters")
        for item in answer.get("results", []):
            if item["outcome"] != "retried":
                click.echo(f"  {item['name']} run {item['execution_id']}: {item['detail']}")
    else:
        answer = client.dead_letter_retry(execution_id or "")
        click.echo(f"retried {execution_id}: new run {answer.get('execution_id')}")


@dlq.command("delete")
@click.argument("execution_id")
@reason_option
@pass_state
def dlq_delete(state: State, execution_id: str, note: str) -> None:
    """Dismiss a dead-lettered run from the queue (admins); it stays in the history."""
    state.client.dead_letter_delete(execution_id, note)
    click.echo(f"removed {execution_id} from the dead-letter queue")


@main.command()
@click.argument("name")
@kind_option
@reason_option
@click.option("--yes", "-y", is_flag=True, help="Do not ask first.")
@pass_state
def delete(state: State, name: str, kind: str | None, note: str, yes: bool) -> None:
    """Delete a task or a DAG (it never fires again; its history stays)."""
    client = state.client
    kind, found = resolve(client, name, kind)
    if not yes:
        click.confirm(f"Delete {kind} {name}?", abort=True)
    if kind == "task":
        client.task_delete(found.id, note)
    else:
        client.dag_delete(found.id, note)
    click.echo(f"{kind} {name} deleted")
