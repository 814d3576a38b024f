"""The task form's handler as fields of its type (a shell command and its environment; an http
method, address, headers and body; a python callable; ...) instead of one JSON object, which
stays available as "Edit as JSON".

Each type's inputs are named `h_<type>_<key>` and all rendered (the page's script shows the
chosen type's only; without it all are shown, grouped by type), each holding that type's
starting template until edited, so choosing another type shows that type's fields and
template, never the previous type's. In "fields" mode the handler is built from the chosen
type's inputs plus the keys of the JSON view that have no input (resource_requirements,
expected_status, ...), taken only when the chosen type accepts them. The handler rules
themselves stay the API's (handler_contract.validation, through the form's TaskInput).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from django import forms

MODE_FIELDS, MODE_JSON = "fields", "json"

# (key, kind, label, help): kind argv | env | headers | json | body | text | method
FIELDS: dict[str, list[tuple[str, str, str, str]]] = {
    "shell": [
        ("command", "argv", "Command", "words as a shell splits them: quote a word with spaces"),
        ("environment", "env", "Environment", "one NAME=value a line; {{secret:name}} allowed"),
    ],
    "http": [
        ("method", "method", "Method", ""),
        ("url", "text", "URL", "https://…; the tenant's allowed hosts only"),
        ("headers", "headers", "Headers", "one Name: value a line"),
        ("body", "body", "Body", "text, or JSON sent as JSON"),
    ],
    "python": [("callable", "text", "Callable", "a registered handler's name, e.g. echo")],
    "celery": [
        ("task", "text", "Celery task", "its registered name"),
        ("args", "json", "Args (JSON list)", ""),
        ("kwargs", "json", "Kwargs (JSON object)", ""),
        ("queue", "text", "Queue", "blank: the default queue"),
    ],
    "container": [
        ("image", "text", "Image", "e.g. alpine:3.20"),
        ("command", "argv", "Command", "words as a shell splits them"),
        ("environment", "env", "Environment", "one NAME=value a line"),
    ],
}
# Keys a type accepts that have no input: kept from the JSON view in "fields" mode.
EXTRAS = {
    "shell": ("resource_requirements", "network"),
    "http": ("timeout_seconds", "expected_status"),
    "python": (),
    "celery": (),
    "container": ("resource_requirements", "network"),
}
TEMPLATES: dict[str, dict[str, Any]] = {
    "shell": {"command": ["echo", "hello"]},
    "http": {"method": "POST", "url": "https://example.com/hook", "headers": {}, "body": ""},
    "python": {"callable": "echo"},
    "celery": {"task": "", "args": [], "kwargs": {}},
    "container": {"image": "alpine:3.20", "command": ["echo", "hello"]},
}
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")


def input_name(handler_type: str, key: str) -> str:
    return f"h_{handler_type}_{key}"


def _widget(kind: str) -> forms.Widget:
    if kind == "method":
        return forms.Select(choices=[(m, m) for m in HTTP_METHODS])
    if kind in ("env", "headers", "body", "json"):
        return forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "class": "code"})
    return forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"})


def add_handler_fields(form: forms.Form) -> None:
    for handler_type, fields in FIELDS.items():
        for key, kind, label, help_text in fields:
            field = forms.CharField(
                required=False, widget=_widget(kind), label=label, help_text=help_text
            )
            field.handler_type = handler_type  # type: ignore[attr-defined]
            form.fields[input_name(handler_type, key)] = field


def grouped(form: forms.Form) -> list[tuple[str, list[Any]]]:
    """(type, its bound fields) for the template."""
    return [
        (handler_type, [form[input_name(handler_type, key)] for key, *_ in fields])
        for handler_type, fields in FIELDS.items()
    ]


def _text_of(kind: str, value: Any) -> str:
    if value is None:
        return ""
    if kind == "argv":
        return shlex.join(str(word) for word in value) if isinstance(value, list) else str(value)
    if kind in ("env", "headers"):
        if not isinstance(value, dict):
            return json.dumps(value)
        joiner = "=" if kind == "env" else ": "
        return "\n".join(f"{name}{joiner}{item}" for name, item in value.items())
    if kind == "json" or (kind == "body" and not isinstance(value, str)):
        return json.dumps(value)
    return str(value)


def initial_fields(handler_type: str, config: dict[str, Any]) -> dict[str, str]:
    """Every type's inputs: the task's own values for its type, templates for the others."""
    initial: dict[str, str] = {}
    for each, fields in FIELDS.items():
        source = config if each == handler_type else TEMPLATES[each]
        for key, kind, *_ in fields:
            initial[input_name(each, key)] = _text_of(kind, source.get(key))
    return initial


def _pairs(text: str, *, separator: str, what: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, found, value = line.partition(separator)
        if not found or not name.strip():
            raise ValueError(f"line {number}: {what}")
        pairs[name.strip()] = value.strip() if separator == ":" else value
    return pairs


def _value_of(kind: str, text: str) -> Any:
    """The config value of one input's text; ValueError says what is wrong."""
    if kind == "argv":
        try:
            return shlex.split(text)
        except ValueError as error:
            raise ValueError(f"cannot split into words: {error}") from error
    if kind == "env":
        return _pairs(text, separator="=", what="write NAME=value")
    if kind == "headers":
        return _pairs(text, separator=":", what="write Name: value")
    if kind == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"not valid JSON: {error.msg}") from error
    if kind == "body" and text.strip()[:1] in ("{", "["):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text
    return text


def handler_from_fields(
    form: forms.Form, *, handler_type: str, json_view: dict[str, Any]
) -> dict[str, Any]:
    """The handler config of the chosen type's inputs (errors added to the form)."""
    config: dict[str, Any] = {
        key: json_view[key] for key in EXTRAS.get(handler_type, ()) if key in json_view
    }
    for key, kind, *_ in FIELDS.get(handler_type, []):
        name = input_name(handler_type, key)
        text = (form.cleaned_data.get(name) or "").strip()
        if not text:
            continue
        try:
            config[key] = _value_of(kind, text)
        except ValueError as error:
            form.add_error(name, str(error))
    return config


def field_for_error(handler_type: str, api_field: str) -> str | None:
    """`handler.url` -> the http URL input, when it is one of the type's inputs."""
    key = api_field.split(".")[1] if api_field.count(".") >= 1 else ""
    if any(key == each for each, *_ in FIELDS.get(handler_type, [])):
        return input_name(handler_type, key)
    return None
