"""The dashboard's task form: the REST API's task shape, edited as HTML fields.

The form only turns text into that shape (JSON textareas parsed, tags split on commas).
Every rule is the API's own: the request goes through the API's `TaskInput` serializer,
then `services.task_definitions` (cron syntax, zone, handler rules, the http handler's
address check, policies, unique name). Their errors, named in the API's dotted terms
(`schedule.expression`), are shown next to the field they concern; nothing is written
unless all of it passes. A save is audited by the service (`task.create` / `task.update`, with
the changed fields), marked as coming from the dashboard.
"""

from __future__ import annotations

import json
from typing import Any
from zoneinfo import available_timezones

from django import forms
from django.db import DataError, transaction
from django.utils import timezone

from api.errors import flatten_errors
from api.parsers import JsonRefused, json_loads_bounded
from api.serializers import TaskInput, TaskOutput
from dashboard import handler_fields
from dashboard.task_flow_fields import (
    add_flow_fields,
    flow_field_for,
    flow_initial,
    flow_request_data,
)
from handler_contract.validation import HANDLER_TYPES
from scheduler_app.choices import Backoff, Catchup, Overlap, ScheduleType
from scheduler_app.errors import DomainError, NotFound
from scheduler_app.models import TaskDefinition, Tenant
from scheduler_app.services import task_definitions
from scheduler_app.services.task_spec import task_spec_errors

# The API's error names -> the form field showing them. A name not listed here is matched
# on its first part ("handler.headers.X" -> handler_config), else shown above the form.
FIELD_OF_ERROR = {
    "schedule": "schedule_type",
    "schedule.type": "schedule_type",
    "schedule.expression": "schedule_expression",
    "schedule.timezone": "timezone",
    "schedule.run_at": "run_at",
    "schedule.anchor": "schedule_expression",
    "handler.type": "handler_type",
    "handler": "handler_config",
    "retry_policy": "max_attempts",
    "policy": "catchup",
}
PREFIX_FIELDS = ("name", "description", "parameters", "tags", "notifications", "priority")
PREFIX_FIELDS += ("timeout_seconds", "enabled")
JSON_OBJECT_FIELDS = ("handler_config", "parameters", "notifications")
EXPRESSION_KINDS = (ScheduleType.CRON, ScheduleType.INTERVAL)


def _choices(values) -> list[tuple[str, str]]:
    return [(value, value) for value in values]


def _select(values) -> forms.Select:
    return forms.Select(choices=_choices(values))


def _text(**attrs: Any) -> forms.TextInput:
    return forms.TextInput(attrs={"autocomplete": "off", **attrs})


def _json_area(rows: int = 4) -> forms.Textarea:
    return forms.Textarea(attrs={"rows": rows, "spellcheck": "false", "class": "code"})


def _field(widget=None, **kwargs: Any) -> forms.CharField:
    # Plain text everywhere (selects included): the serializer and the services judge it.
    return forms.CharField(required=False, widget=widget or _text(), **kwargs)


class TaskForm(forms.Form):
    name = _field()
    description = _field(forms.Textarea(attrs={"rows": 2}))
    enabled = forms.BooleanField(required=False)

    schedule_type = _field(_select(ScheduleType.values), label="Schedule type")
    schedule_expression = _field(
        _text(placeholder="*/5 * * * *  or  15m"),
        label="Expression",
        help_text="cron: 5 fields; interval: e.g. 30s, 15m, 2h, 1d",
    )
    timezone = _field(_text(list="timezones"), label="Timezone", help_text="IANA name")
    run_at = _field(
        _text(placeholder="2030-01-31T09:00:00"),
        label="Run at",
        help_text="once: ISO 8601; without an offset it is read in the task's timezone",
    )
    schedule_exclude = _field(
        _json_area(3),
        label="Exclude (JSON)",
        help_text='fire times to skip, e.g. [{"calendar": "holidays:US"}, {"date": "2026-12-25"}, '
        '{"from": "2026-12-24", "to": "2027-01-01", "reason": "freeze"}, {"cron": "* * * * 6,0"}]',
    )

    handler_type = _field(label="Handler type")
    handler_mode = forms.ChoiceField(
        required=False,
        choices=[(handler_fields.MODE_FIELDS, "fields"), (handler_fields.MODE_JSON, "JSON")],
        widget=forms.RadioSelect(attrs={"data-handler-mode": ""}),
        label="Edit the handler as",
    )
    handler_config = _field(
        _json_area(6),
        label="Handler (JSON)",
        help_text=(
            "shell: command (argv list), environment, resource_requirements · "
            "http: url, method, headers, body, timeout_seconds, expected_status · "
            "python: callable · celery: task, args, kwargs, queue · "
            "container: image, command, environment, resource_requirements"
        ),
    )
    parameters = _field(_json_area(), label="Parameters (JSON)")
    timeout_seconds = _field(_text(inputmode="numeric"), label="Timeout (s)")
    priority = _field(_text(inputmode="numeric"), label="Priority", help_text="1 (urgent) to 10")
    tags = _field(label="Tags", help_text="comma-separated")
    notifications = _field(
        _json_area(3),
        label="Notifications (JSON)",
        help_text='e.g. {"on_failure": ["ops-webhook"]}; events on_failure, on_success, on_dlq',
    )

    max_attempts = _field(_text(inputmode="numeric"), label="Max attempts")
    backoff = _field(_select(Backoff.values), label="Backoff")
    base_delay_seconds = _field(_text(inputmode="decimal"), label="Base delay (s)")
    max_delay_seconds = _field(_text(inputmode="decimal"), label="Max delay (s)")

    catchup = _field(_select(Catchup.values), label="Catch-up")
    overlap = _field(_select(Overlap.values), label="Overlap")
    jitter_seconds = _field(_text(inputmode="numeric"), label="Jitter (s)")
    start_at = _field(_text(placeholder="2030-01-01T00:00:00Z"), label="Start at")
    end_at = _field(_text(placeholder="2030-12-31T23:59:59Z"), label="End at")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Every type, as the API accepts: runs go to workers that offer the type.
        self.fields["handler_type"].widget = _select(HANDLER_TYPES)
        handler_fields.add_handler_fields(self)
        add_flow_fields(self)

    @property
    def handler_groups(self):
        return handler_fields.grouped(self)

    def _handler_in_fields(self) -> bool:
        # A post without the choice (an older page, a script) sends the JSON, as before.
        data = getattr(self, "cleaned_data", None) or {}
        return data.get("handler_mode") == handler_fields.MODE_FIELDS

    # --- text -> the API's request shape ---------------------------------------------

    def _json_object(self, name: str) -> Any:
        text = (self.cleaned_data.get(name) or "").strip()
        if not text:
            return {}
        try:
            return json_loads_bounded(text)
        except JsonRefused as error:
            self.add_error(name, str(error))
            return None
        except json.JSONDecodeError as error:
            self.add_error(
                name,
                f"not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})",
            )
            return None

    def request_data(self) -> dict[str, Any] | None:
        """The API's request body for this form, or None (errors added) if a JSON field
        does not parse. Blank numbers are left out, as an API client would leave them."""
        data = self.cleaned_data
        parsed = {name: self._json_object(name) for name in JSON_OBJECT_FIELDS}
        # A field that does not parse stands in as {} so the rest is still judged: every
        # mistake is reported in one submit (the errors keep the form from saving).
        parsed = {name: {} if value is None else value for name, value in parsed.items()}
        handler = parsed["handler_config"]
        if not isinstance(handler, dict):
            self.add_error("handler_config", "must be a JSON object")
            handler = {}
        if self._handler_in_fields():
            handler = handler_fields.handler_from_fields(
                self, handler_type=data["handler_type"], json_view=handler
            )
        schedule = {"type": data["schedule_type"], "timezone": data["timezone"]}
        # Only the chosen kind's fields: a run_at left over from a one-shot is not a cron's.
        if data["schedule_expression"] and data["schedule_type"] in EXPRESSION_KINDS:
            schedule["expression"] = data["schedule_expression"]
        if data["run_at"] and data["schedule_type"] == ScheduleType.ONCE:
            schedule["run_at"] = data["run_at"]
        exclude = self._json_object("schedule_exclude")
        if exclude:  # blank or [] is no exclusions; a wrong shape is the API's to name
            schedule["exclude"] = exclude
        body: dict[str, Any] = {
            "name": data["name"],
            "description": data["description"],
            "enabled": data["enabled"],
            "schedule": schedule,
            "handler": {**handler, "type": data["handler_type"]},
            "parameters": parsed["parameters"],
            "notifications": parsed["notifications"],
            "tags": [tag.strip() for tag in data["tags"].split(",") if tag.strip()],
            "retry_policy": {"backoff": data["backoff"]},
            "policy": {
                "catchup": data["catchup"],
                "overlap": data["overlap"],
                "start_at": data["start_at"] or None,
                "end_at": data["end_at"] or None,
            },
        }
        for name in ("timeout_seconds", "priority"):
            if data[name]:
                body[name] = data[name]
        for name in ("max_attempts", "base_delay_seconds", "max_delay_seconds"):
            if data[name]:
                body["retry_policy"][name] = data[name]
        if data["jitter_seconds"]:
            body["policy"]["jitter_seconds"] = data["jitter_seconds"]
        body.update(flow_request_data(self, self._json_list))
        return body

    def _json_list(self, name: str) -> Any:
        """A JSON field holding a list; blank is [] (none)."""
        return self._json_object(name) if (self.cleaned_data.get(name) or "").strip() else []

    # --- the API's errors -> form fields ------------------------------------------------

    def add_api_error(self, api_field: str | None, message: str) -> None:
        name = _form_field_for(api_field)
        if name == "handler_config" and api_field and self._handler_in_fields():
            own = handler_fields.field_for_error(self.cleaned_data["handler_type"], api_field)
            if own is not None:
                if own not in self.errors:  # the field's own reading error says it first
                    self.add_error(own, message)
                return
        # Said where it is when the field holds more than the error names (handler.headers.X).
        exact = name is not None and (
            api_field in FIELD_OF_ERROR
            or api_field in (name, f"retry_policy.{name}", f"policy.{name}")
            or (api_field is not None and message.startswith(api_field))
        )
        self.add_error(name, message if exact or not api_field else f"{api_field}: {message}")


def _form_field_for(api_field: str | None) -> str | None:
    if not api_field or api_field == "non_field_errors":
        return None
    if api_field in FIELD_OF_ERROR:
        return FIELD_OF_ERROR[api_field]
    if (flow := flow_field_for(api_field)) is not None:
        return flow
    head, _, rest = api_field.partition(".")
    if head == "schedule" and rest.startswith("exclude"):
        return "schedule_exclude"
    if head == "handler":
        return "handler_config"
    if head in ("retry_policy", "policy") and rest:
        field = rest.split(".")[0]
        return field if field in TaskForm.base_fields else None
    if head in PREFIX_FIELDS:
        return head
    return None


def initial_for(task: TaskDefinition | None) -> dict[str, Any]:
    """Form values showing `task` as the API returns it (defaults for a new task)."""
    if task is None:
        defaults = TaskDefinition()
        return {
            "enabled": True,
            "schedule_type": ScheduleType.CRON,
            "timezone": "UTC",
            "handler_type": "shell",
            "handler_mode": handler_fields.MODE_FIELDS,
            "handler_config": json.dumps(handler_fields.TEMPLATES["shell"], indent=2),
            **handler_fields.initial_fields("shell", handler_fields.TEMPLATES["shell"]),
            "parameters": "{}",
            "notifications": "{}",
            "timeout_seconds": defaults.timeout_seconds,
            "priority": defaults.priority,
            "max_attempts": defaults.max_attempts,
            "backoff": defaults.backoff,
            "base_delay_seconds": defaults.base_delay_seconds,
            "max_delay_seconds": defaults.max_delay_seconds,
            "catchup": defaults.catchup,
            "overlap": defaults.overlap,
            "jitter_seconds": defaults.jitter_seconds,
        }
    shown = TaskOutput(task).data
    handler = dict(shown["handler"] or {})
    handler_type = handler.pop("type", task.handler_type)
    schedule, retry, policy = shown["schedule"], shown["retry_policy"], shown["policy"]
    return {
        "name": shown["name"],
        "description": shown["description"],
        "enabled": shown["enabled"],
        "schedule_type": schedule["type"],
        "schedule_expression": schedule.get("expression", ""),
        "timezone": schedule["timezone"],
        "run_at": schedule.get("run_at", ""),
        "schedule_exclude": json.dumps(schedule["exclude"]) if schedule.get("exclude") else "",
        "handler_type": handler_type,
        "handler_mode": handler_fields.MODE_FIELDS,
        "handler_config": json.dumps(handler, indent=2),
        **handler_fields.initial_fields(handler_type, handler),
        "parameters": json.dumps(shown["parameters"], indent=2),
        "timeout_seconds": shown["timeout_seconds"],
        "priority": shown["priority"],
        "tags": ", ".join(shown["tags"] or []),
        "notifications": json.dumps(shown["notifications"], indent=2),
        "max_attempts": retry["max_attempts"],
        "backoff": retry["backoff"],
        "base_delay_seconds": retry["base_delay_seconds"],
        "max_delay_seconds": retry["max_delay_seconds"],
        "catchup": policy["catchup"],
        "overlap": policy["overlap"],
        "jitter_seconds": policy["jitter_seconds"],
        "start_at": policy["start_at"] or "",
        "end_at": policy["end_at"] or "",
        **flow_initial(shown),
    }


def timezone_names() -> list[str]:
    return sorted(available_timezones())


def task_save_from_form(
    form: TaskForm, *, tenant: Tenant, task: TaskDefinition | None, user
) -> TaskDefinition | None:
    """Create (task=None) or replace `task` from a bound form, as PUT/POST on the API would,
    and audit it. None, with the errors on the form, when anything is refused."""
    if not form.is_valid():
        return None
    body = form.request_data()
    if body is None:
        return None
    request = TaskInput(data=body)
    checked: dict[str, Any] = {}
    if request.is_valid():
        checked = request.validated_data
    else:
        refused = flatten_errors(request.errors)
        for api_field, messages in refused.items():
            for message in messages:
                form.add_api_error(api_field, message)
        # The parts the serializer accepted are still judged below (partial, as a PATCH).
        tops = {(api_field or "").split(".")[0] for api_field in refused}
        rest = TaskInput(data={k: v for k, v in body.items() if k not in tops}, partial=True)
        checked = rest.validated_data if rest.is_valid() else {}
    # The services stop at their first refusal; each part of the spec is judged on its own
    # first, by the same code, so the form lists every mistake at once.
    # A pool's slots are judged with the pool (the service's save does: alone, they need one).
    judged = {k: v for k, v in checked.items() if k != "pool_slots" or checked.get("pool") is None}
    for error in task_spec_errors(
        judged,
        anchor=timezone.now(),
        require=False,
        allowed_hosts=tenant.webhook_allowed_hosts,
    ):
        if _form_field_for(error.field) not in form.errors:  # one stage's word per field
            form.add_api_error(error.field, error.message)
    if form.errors:
        return None
    try:
        with transaction.atomic():
            if task is None:
                saved = task_definitions.task_create(
                    tenant=tenant, spec=request.validated_data, created_by=user
                )
            else:
                # A fresh, locked copy: a refused update leaves the caller's object as shown.
                current = (
                    TaskDefinition.objects.select_for_update()
                    .filter(pk=task.pk, tenant=tenant, deleted_at__isnull=True)
                    .first()
                )
                if current is None:
                    raise NotFound("this task was deleted meanwhile")
                # Audited by the service, for the dashboard's signed-in user (api.audit).
                saved = task_definitions.task_update(task=current, spec=request.validated_data)
    except DomainError as error:
        form.add_api_error(error.field, error.message)
        return None
    except DataError:
        form.add_error(None, "the form contains a value that cannot be stored")
        return None
    return saved
