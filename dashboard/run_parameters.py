"""The "trigger with parameters" form: one input per declared parameter, or the same values
as one JSON object.

A task declares its parameters as `parameters` (name -> default value), a DAG in its spec's
`parameters`; the declaration is the defaults, so each input's kind is read from its default:
a boolean is a checkbox, an integer or a float a number, "2030-01-31" a date, an ISO 8601
date-time a date-time, a list or an object a JSON value, anything else text. A parameter
whose default is null has no value to run with: it is required. Without declared parameters
the form is the JSON object only.

What the form sends is then judged as the API's trigger judges a body (`TriggerInput`, then
the service's own refusals: size cap, secret references), so the dashboard accepts nothing the
API would refuse; a refusal is shown next to its input and nothing is created.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from api.parsers import JsonRefused, json_loads_bounded
from api.serializers import TriggerInput

MODE_FIELDS = "fields"
MODE_JSON = "json"
PREFIX = "param."
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$")


@dataclass
class ParameterInput:
    """One declared parameter as an input: its kind, the text shown, its refusal."""

    name: str
    kind: str  # boolean | integer | number | date | datetime | json | text
    default: Any
    value: str = ""
    checked: bool = False
    error: str = ""
    index: int = 0

    @property
    def input_name(self) -> str:
        return f"{PREFIX}{self.name}"

    @property
    def input_id(self) -> str:
        return f"param-{self.index}"

    @property
    def default_text(self) -> str:
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        return _shown(self.kind, self.default) or '""'

    @property
    def required(self) -> bool:
        return self.default is None


@dataclass
class ParametersForm:
    inputs: list[ParameterInput]
    mode: str = MODE_FIELDS
    json_text: str = ""
    json_error: str = ""
    errors: list[str] = field(default_factory=list)

    @property
    def declared(self) -> bool:
        return bool(self.inputs)

    @property
    def has_errors(self) -> bool:
        return bool(self.json_error or self.errors or any(i.error for i in self.inputs))


def _kind_of(default: Any) -> str:
    if isinstance(default, bool):
        return "boolean"
    if isinstance(default, int):
        return "integer"
    if isinstance(default, float):
        return "number"
    if isinstance(default, list | dict):
        return "json"
    if isinstance(default, str) and _DATE.match(default):
        return "date"
    if isinstance(default, str) and _DATETIME.match(default):
        return "datetime"
    return "text"


def _shown(kind: str, value: Any) -> str:
    if value is None:
        return ""
    if kind == "json":
        return json.dumps(value)
    return str(value)


def parameters_form(declared: Mapping[str, Any] | None) -> ParametersForm:
    """The unbound form: every declared parameter at its default."""
    inputs = []
    for index, (name, default) in enumerate((declared or {}).items()):
        kind = _kind_of(default)
        inputs.append(
            ParameterInput(
                name=name,
                kind=kind,
                default=default,
                value=_shown(kind, default),
                checked=default is True,
                index=index,
            )
        )
    defaults = dict(declared or {})
    return ParametersForm(
        inputs=inputs,
        mode=MODE_FIELDS if inputs else MODE_JSON,
        json_text=json.dumps(defaults, indent=2) if inputs else "{}",
    )


def _parsed_json(text: str) -> tuple[Any, str]:
    try:
        return json_loads_bounded(text), ""
    except JsonRefused as error:
        return None, str(error)
    except json.JSONDecodeError as error:
        return None, f"not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})"


def _read_input(item: ParameterInput, data: Mapping[str, Any]) -> Any:
    """The typed value of one input (its error set when it does not read as its kind)."""
    raw = str(data.get(item.input_name, "")).strip()
    item.value = raw
    if item.kind == "boolean":
        item.checked = item.input_name in data
        return item.checked
    if not raw:
        if item.required:
            item.error = "required: this parameter has no default"
        return None
    if item.kind == "integer":
        try:
            return int(raw)
        except ValueError:
            item.error = "must be a whole number"
    elif item.kind == "number":
        try:
            return float(raw)
        except ValueError:
            item.error = "must be a number"
    elif item.kind == "date":
        try:
            return date.fromisoformat(raw).isoformat()
        except ValueError:
            item.error = "must be a date, YYYY-MM-DD"
    elif item.kind == "datetime":
        try:
            datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            item.error = "must be an ISO 8601 date-time, e.g. 2030-01-31T09:00:00Z"
        return raw
    elif item.kind == "json":
        value, problem = _parsed_json(raw)
        item.error = f"JSON value: {problem}" if problem else ""
        return value
    else:
        return raw
    return None


def parameters_from_post(
    declared: Mapping[str, Any] | None, data: Mapping[str, Any]
) -> tuple[ParametersForm, dict[str, Any] | None]:
    """The bound form and the run's parameters (None, with the errors on the form, when
    refused). `data` is the POST: `parameters_mode` says which of the two views was sent."""
    form = parameters_form(declared)
    form.mode = (
        MODE_JSON if data.get("parameters_mode") == MODE_JSON or not form.inputs else MODE_FIELDS
    )
    form.json_text = str(data.get("parameters_json", form.json_text))
    if form.mode == MODE_JSON:
        parsed, problem = (None, "") if not form.json_text.strip() else _parsed_json(form.json_text)
        if problem:
            form.json_error = problem
            return form, None
        parsed = {} if parsed is None else parsed
        for item in form.inputs:
            if item.required and (not isinstance(parsed, dict) or parsed.get(item.name) is None):
                form.json_error = f"{item.name} is required: it has no default"
    else:
        parsed = {item.name: _read_input(item, data) for item in form.inputs}
        parsed = {name: value for name, value in parsed.items() if value is not None}
    # The API's own check of a trigger body.
    body = TriggerInput(data={"parameters": parsed})
    if not body.is_valid():
        form.json_error = 'must be a JSON object, for example {"date": "2030-01-01"}'
        form.mode = MODE_JSON
    if form.has_errors:
        return form, None
    return form, dict(body.validated_data.get("parameters") or {})


def form_refused(form: ParametersForm, message: str) -> None:
    """A refusal of the service (size cap, a secret reference): said above the form."""
    form.errors.append(message)
