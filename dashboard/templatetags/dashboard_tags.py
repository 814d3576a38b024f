from __future__ import annotations

import json

from django import template
from django.utils import timezone

from dashboard.durations import format_duration
from dashboard.roles import route_allows
from dashboard.run_wording import dag_outcome_text, error_text
from scheduler_app.task_names import task_display_name

register = template.Library()


@register.filter
def invitation_state(invitation) -> str:
    return invitation.status_at(timezone.now())


@register.filter
def may(role: str, route_and_key: str) -> bool:
    """`{% if role|may:"dlq-action.delete" %}`: a button shows to who the API's rule for its
    route allows (dashboard.roles), not to a role written in the template."""
    return bool(role) and route_allows(role, route_and_key)


@register.filter
def task_name(name: str) -> str:
    """A DAG node's hidden task as "dag > node (v1)" (scheduler_app.task_names), as the admin
    says it."""
    return task_display_name(str(name or ""))


@register.filter
def flower_task(flower_url: str, task_id) -> str:
    """Flower's page of a Celery task: a single run's task id is its execution id
    (scheduler_app.ringing.publish). FLOWER_URL with or without its trailing slash."""
    return f"{str(flower_url or '').rstrip('/')}/task/{task_id}"


@register.filter
def get_item(mapping, key):
    return mapping.get(key) if mapping else None


# What people call the states the code names (snake_case stays in data-* attributes and CSS).
STATE_LABELS = {
    "partially_completed": "Partially completed",
    # Never dispatched: an upstream failed. Said as what it means to the person reading.
    "upstream_failed": "Not run (upstream failed)",
    "timed_out": "Timed out",
}


@register.filter
def state_label(status: str) -> str:
    text = str(status or "")
    return STATE_LABELS.get(text, text.replace("_", " ").capitalize())


@register.filter
def short_id(value) -> str:
    """The first 8 characters of a UUID: what a person reads and types (the Runs page's search
    takes a prefix)."""
    return str(value or "")[:8]


@register.filter
def lag(seconds: float | None) -> str:
    """Schedule lag for reading: a start a hair before its scheduled time (clock skew between
    the beat and a worker, an early claim) is "on time", never "-0.490"."""
    if seconds is None:
        return "–"
    if seconds < 0.0005:
        return "on time"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.2f} s"


@register.simple_tag(takes_context=True)
def query_with(context, **changes) -> str:
    """This page's query string with `changes` applied (None drops a key), for paging links."""
    query = context["request"].GET.copy()
    query.pop("fragment", None)
    for key, value in changes.items():
        if value is None:
            query.pop(key, None)
        else:
            query[key] = value
    encoded = query.urlencode()
    return f"?{encoded}" if encoded else "?"


@register.simple_tag
def described(field):
    """The field's widget pointing (aria-describedby) at the help and error elements
    _field.html renders with those ids, and only at those, and marked invalid on error."""
    ids = []
    if field.help_text:
        ids.append(f"{field.auto_id}_helptext")
    if field.errors:
        ids.append(f"{field.auto_id}_errors")
    attrs = {"aria-describedby": " ".join(ids)} if ids else {}
    if field.errors:
        attrs["aria-invalid"] = "true"
    if not ids:
        # Django adds a describedby of its own for help text; with none there is nothing to
        # point at.
        field.field.widget.attrs.pop("aria-describedby", None)
    return field.as_widget(attrs=attrs)


@register.filter
def as_fields(config) -> list[tuple[str, str]]:
    """A handler's configuration as label/value pairs for reading (not a Python repr): lists
    joined by spaces (a command line), objects as compact JSON, the type left out (shown
    beside)."""

    if not isinstance(config, dict):
        return [("", str(config))]
    rows = []
    for key, value in config.items():
        if key == "type":
            continue
        if isinstance(value, list) and all(isinstance(part, str) for part in value):
            shown = " ".join(value)
        elif isinstance(value, dict | list):
            shown = json.dumps(value, sort_keys=True)
        else:
            shown = str(value)
        rows.append((key.replace("_", " "), shown))
    return rows


@register.filter
def run_duration(execution) -> str:
    """Wall time of a run that ended ("-" before: see time_tags.run_took for the elapsed
    time of a run still going; a run that has not ended has no duration)."""
    if execution is None or execution.started_at is None or execution.completed_at is None:
        return "–"
    return format_duration((execution.completed_at - execution.started_at).total_seconds()) or "–"


@register.filter
def run_error(execution) -> str:
    """The run's error said once (dashboard.run_wording.error_text)."""
    if execution is None:
        return ""
    return error_text(execution.error_class, execution.error_message)


@register.filter
def dag_outcome(outcome) -> str:
    """ "transform failed, load not run" of a dags.outcome_selectors.RunOutcome."""
    if not outcome:
        return ""
    return dag_outcome_text(outcome.failed, outcome.not_run)


@register.filter
def pauser(paused_by: str) -> str:
    """Who a pause record names, the way a person reads it: `user:ana` is ana, the runbook
    and the remaining-runs count are said as what they are."""
    if paused_by == "runbook":
        return "the runbook"
    if paused_by == "remaining_runs":
        return "policy.remaining_runs"
    kind, _, name = paused_by.partition(":")
    if kind == "user" and name:
        return name
    if kind == "apikey" and name:
        return f"API key {name}"
    return paused_by or "someone"
