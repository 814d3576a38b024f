"""The task form's "Flow control" section: concurrency limits and rate limits (JSON lists, as
the API takes them), a pool of the tenant's with its slots, a singleton key and a debounce
window (docs/tasks/flow-control.md, flow-triggers.md).

As the rest of the form, this only turns text into the API's request shape: the API's
serializer and the services' own spec code (`scheduler_app.flow_spec`,
`flow_trigger_spec`, the pool check) judge it, and their errors, named in the API's terms
(`concurrency[0].max_running`, `debounce.seconds`), are shown next to the field here.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms

from scheduler_app.models import Tenant
from scheduler_app.selectors.pools import pool_list, pool_usage

FLOW_FIELD_NAMES = (
    "concurrency",
    "rate_limit",
    "pool",
    "pool_slots",
    "singleton",
    "singleton_key",
    "debounce_key",
    "debounce_seconds",
    "debounce_max_wait_seconds",
)
# The API's error names -> the field showing them (a list's `[i].x` goes to the list).
_FIELD_OF_ERROR = {
    "pool": "pool",
    "pool_slots": "pool_slots",
    "singleton": "singleton_key",
    "singleton.key": "singleton_key",
    "debounce": "debounce_seconds",
    "debounce.key": "debounce_key",
    "debounce.seconds": "debounce_seconds",
    "debounce.max_wait_seconds": "debounce_max_wait_seconds",
}


def add_flow_fields(form: forms.Form) -> None:
    text = {"autocomplete": "off"}
    code = {"rows": 3, "spellcheck": "false", "class": "code"}
    form.fields.update(
        concurrency=forms.CharField(
            required=False,
            widget=forms.Textarea(attrs=code),
            label="Concurrency limits (JSON)",
            help_text='e.g. [{"key": "{{ parameters.customer_id }}", "max_running": 2, '
            '"strategy": "queue"}]; strategies queue, cancel_in_progress, cancel_newest, skip',
        ),
        rate_limit=forms.CharField(
            required=False,
            widget=forms.Textarea(attrs=code),
            label="Rate limits (JSON)",
            help_text='e.g. [{"key": "{{ parameters.account }}", "limit": 10, "per": "minute"}]'
            "; per second, minute or hour",
        ),
        pool=forms.CharField(
            required=False, widget=forms.Select(choices=[("", "none")]), label="Pool"
        ),
        pool_slots=forms.CharField(
            required=False,
            widget=forms.TextInput(attrs={**text, "inputmode": "numeric"}),
            label="Pool slots",
            help_text="what one run takes of the pool (default 1)",
        ),
        singleton=forms.BooleanField(required=False, label="Singleton"),
        singleton_key=forms.CharField(
            required=False,
            widget=forms.TextInput(attrs={**text, "placeholder": "{{ task }}"}),
            label="Singleton key",
            help_text="at most one queued-or-running run per key; a further trigger joins it",
        ),
        debounce_key=forms.CharField(
            required=False,
            widget=forms.TextInput(attrs={**text, "placeholder": "{{ task }}"}),
            label="Debounce key",
        ),
        debounce_seconds=forms.CharField(
            required=False,
            widget=forms.TextInput(attrs={**text, "inputmode": "numeric"}),
            label="Debounce window (s)",
            help_text="triggers of a key within the window collapse into one run (blank: off)",
        ),
        debounce_max_wait_seconds=forms.CharField(
            required=False,
            widget=forms.TextInput(attrs={**text, "inputmode": "numeric"}),
            label="Debounce max wait (s)",
            help_text="default ten windows",
        ),
    )


def pool_choices_set(form: forms.Form, *, tenant: Tenant) -> None:
    """The pool select lists the tenant's pools with their slots in use now (and the value
    shown, should its pool have been deleted since: refused when saved, not dropped)."""
    names = list(pool_list(tenant=tenant).values_list("name", "slots"))
    usage = pool_usage(tenant=tenant, names=[name for name, _ in names])
    choices = [("", "none")] + [
        (name, f"{name} ({usage[name]['running']} of {slots} slots in use)")
        for name, slots in names
    ]
    current = form["pool"].value()
    if current and current not in {name for name, _ in names}:
        choices.append((current, f"{current} (no such pool)"))
    form.fields["pool"].widget.choices = choices


def _number(text: str) -> Any:
    """A whole number as the API takes it; other text as it is (the spec names the field)."""
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        return text


def flow_request_data(form: forms.Form, json_list) -> dict[str, Any]:
    """The flow-control part of the API's request body. Blank fields turn each off (the form
    saves a whole task, as a PUT). `json_list(name)` parses a JSON field (None: refused)."""
    data = form.cleaned_data
    body: dict[str, Any] = {}
    for name in ("concurrency", "rate_limit"):
        parsed = json_list(name)
        body[name] = [] if parsed is None else parsed
    body["pool"] = data["pool"] or None
    body["pool_slots"] = _number(data["pool_slots"]) if data["pool_slots"].strip() else None
    body["singleton"] = None
    if data["singleton"] or data["singleton_key"].strip():
        body["singleton"] = {"key": data["singleton_key"].strip() or "{{ task }}"}
    body["debounce"] = None
    if data["debounce_seconds"].strip() or data["debounce_key"].strip():
        debounce = {"key": data["debounce_key"].strip() or "{{ task }}"}
        if data["debounce_seconds"].strip():
            debounce["seconds"] = _number(data["debounce_seconds"])
        if data["debounce_max_wait_seconds"].strip():
            debounce["max_wait_seconds"] = _number(data["debounce_max_wait_seconds"])
        body["debounce"] = debounce
    return body


def flow_initial(shown: dict[str, Any]) -> dict[str, Any]:
    """Form values showing a task's flow control as the API returns it."""
    singleton, debounce = shown.get("singleton"), shown.get("debounce") or {}
    return {
        "concurrency": json.dumps(shown["concurrency"]) if shown.get("concurrency") else "",
        "rate_limit": json.dumps(shown["rate_limit"]) if shown.get("rate_limit") else "",
        "pool": shown.get("pool") or "",
        "pool_slots": shown.get("pool_slots") or "",
        "singleton": singleton is not None,
        "singleton_key": (singleton or {}).get("key", ""),
        "debounce_key": debounce.get("key", ""),
        "debounce_seconds": debounce.get("seconds", ""),
        "debounce_max_wait_seconds": debounce.get("max_wait_seconds", ""),
    }


def flow_field_for(api_field: str) -> str | None:
    """The form field showing an error the API names `api_field`, if it is flow control's."""
    if api_field in _FIELD_OF_ERROR:
        return _FIELD_OF_ERROR[api_field]
    head = api_field.split("[")[0].split(".")[0]
    if head in ("concurrency", "rate_limit"):
        return head
    if head in ("singleton", "debounce"):
        return _FIELD_OF_ERROR[head]
    return None
