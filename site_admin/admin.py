"""Django admin for every model, with the operator actions (each calls a service). Tenants
and memberships: `site_admin.admin_tenants`, registered from here."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.defaultfilters import filesizeformat
from django.urls import path

from runs import dead_letters
from scheduler_app import selectors
from scheduler_app.choices import DAG_NODE_TAG
from scheduler_app.errors import Conflict, DomainError
from scheduler_app.models import (
    ApiKey,
    AuditEntry,
    ExecutionLog,
    Secret,
    TaskDefinition,
    TaskExecution,
)
from scheduler_app.services import task_definitions
from scheduler_app.services.api_keys import api_key_revoke
from scheduler_app.services.fleet import execution_cancel
from scheduler_app.services.task_spec import task_spec_to_fields
from site_admin import admin_tenants  # noqa: F401  (registers the tenants' admin)


def _to_the_second(value) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "–"


def _admin_user(request: HttpRequest) -> str:
    """Who a pause from the admin records: the signed-in admin user."""
    return f"user:{request.user.get_username()}"


TASK_BUTTONS = {
    "trigger": task_definitions.task_trigger,
    "pause": task_definitions.task_pause,
    "resume": task_definitions.task_resume,
}


def _spec_from_admin(obj: TaskDefinition) -> dict:
    """The admin edits model fields; the services take the API's shape."""
    return {
        "name": obj.name,
        "description": obj.description,
        "schedule": {
            "type": obj.schedule_type,
            "expression": obj.schedule_expression,
            "timezone": obj.timezone,
            "run_at": obj.run_at.isoformat() if obj.run_at else None,
            "exclude": obj.schedule_exclude,
        },
        "handler": {**(obj.handler_config or {}), "type": obj.handler_type},
        "timeout_seconds": obj.timeout_seconds,
        "retry_policy": {
            "max_attempts": obj.max_attempts,
            "backoff": obj.backoff,
            "base_delay_seconds": obj.base_delay_seconds,
            "max_delay_seconds": obj.max_delay_seconds,
        },
        "priority": obj.priority,
        "parameters": obj.parameters,
        "tags": obj.tags,
        "notifications": obj.notifications,
        "enabled": obj.enabled,
        "policy": {
            "catchup": obj.catchup,
            "overlap": obj.overlap,
            "jitter_seconds": obj.jitter_seconds,
            "start_at": obj.start_at,
            "end_at": obj.end_at,
            "pause_after_failures": obj.pause_after_failures,
            "health_check": obj.health_check,
            "remaining_runs": obj.remaining_runs,
        },
        "owner": obj.owner,
    }


class TaskDefinitionForm(forms.ModelForm):
    """Runs the same domain validation as the API, so a bad cron is a form error, not a 500."""

    class Meta:
        model = TaskDefinition
        fields = "__all__"

    def clean(self) -> dict:
        cleaned = super().clean()
        candidate = TaskDefinition(**{k: v for k, v in cleaned.items() if k != "tenant"})
        tenant = cleaned.get("tenant")
        try:
            task_spec_to_fields(
                _spec_from_admin(candidate),
                anchor=candidate.created_at,
                allowed_hosts=tenant.webhook_allowed_hosts if tenant else (),
            )
        except DomainError as error:
            field = _ADMIN_FIELD_FOR.get(error.field or "")
            message = error.message
            if (error.field or "").startswith("schedule.exclude"):
                field, message = "schedule_exclude", f"{error.field}: {error.message}"
            self.add_error(field if field in self.fields else None, message)
        return cleaned


_ADMIN_FIELD_FOR = {
    "name": "name",
    "schedule.type": "schedule_type",
    "schedule.expression": "schedule_expression",
    "schedule.timezone": "timezone",
    "schedule.run_at": "run_at",
    "handler.type": "handler_type",
    "timeout_seconds": "timeout_seconds",
    "priority": "priority",
}


class DagNodeTaskFilter(admin.SimpleListFilter):
    """Hidden DAG node tasks are left out of the list unless asked for."""

    title = "DAG node tasks"
    parameter_name = "dag_nodes"

    def lookups(self, request: HttpRequest, model_admin) -> list[tuple[str, str]]:
        return [("show", "Included"), ("only", "Only")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[TaskDefinition]):
        if self.value() == "show":
            return queryset
        visible = selectors.visible_tasks(queryset)
        if self.value() == "only":
            return queryset.exclude(pk__in=visible.values("pk"))
        return visible


@admin.register(TaskDefinition)
class TaskDefinitionAdmin(admin.ModelAdmin):
    form = TaskDefinitionForm
    # Chosen to fit a 1366 px screen: the schedule in one column, times to the second.
    list_display = [
        "name",
        "tenant",
        "schedule",
        "handler_type",
        "priority",
        "state",
        "next_fire",
        "last_fired",
    ]
    change_form_template = "admin/scheduler_app/taskdefinition/change_form.html"
    list_filter = [
        DagNodeTaskFilter,
        "tenant",
        "schedule_type",
        "handler_type",
        "enabled",
        "paused",
        "priority",
        "catchup",
        "overlap",
    ]
    search_fields = ["name", "description", "schedule_expression"]
    readonly_fields = [
        "id",
        "next_fire_at",
        "last_fired_at",
        "created_at",
        "updated_at",
        "changed_at",
        "deleted_at",
        "created_by",
        "capability",  # derived from the handler by the service
        # The pause record and the runbook's counter: written by the pause and the runbook.
        "paused_at",
        "paused_by",
        "pause_note",
        "consecutive_failures",
    ]
    actions = ["trigger_now", "pause", "resume"]
    date_hierarchy = "created_at"

    def get_queryset(self, request: HttpRequest) -> QuerySet[TaskDefinition]:
        return (
            super().get_queryset(request).filter(deleted_at__isnull=True).select_related("tenant")
        )

    @admin.display(description="schedule", ordering="schedule_type")
    def schedule(self, obj: TaskDefinition) -> str:
        if obj.schedule_type in ("cron", "interval"):
            return f"{obj.schedule_type} {obj.schedule_expression} ({obj.timezone})"
        return obj.schedule_type

    @admin.display(description="state", ordering="paused")
    def state(self, obj: TaskDefinition) -> str:
        """Paused ones say by whom ("user:<name>", "runbook", "remaining_runs")."""
        if obj.paused:
            return f"paused by {obj.paused_by}" if obj.paused_by else "paused"
        return "active" if obj.enabled else "disabled"

    @admin.display(description="next fire (UTC)", ordering="next_fire_at")
    def next_fire(self, obj: TaskDefinition) -> str:
        return _to_the_second(obj.next_fire_at)

    @admin.display(description="last fired (UTC)", ordering="last_fired_at")
    def last_fired(self, obj: TaskDefinition) -> str:
        return _to_the_second(obj.last_fired_at)

    def get_urls(self):
        own = [
            path(
                "<uuid:task_id>/run/<str:action>/",
                self.admin_site.admin_view(self.button_view),
                name="scheduler_app_taskdefinition_button",
            )
        ]
        return own + super().get_urls()

    def button_view(self, request: HttpRequest, task_id, action: str) -> HttpResponse:
        """Trigger / Pause / Resume from the change form (POST), as the list's actions do."""
        task = self.get_queryset(request).filter(pk=task_id).first()
        if request.method != "POST" or task is None or action not in TASK_BUTTONS:
            raise Http404("no such task or button")
        if not self.has_change_permission(request, task) or DAG_NODE_TAG in (task.tags or []):
            raise PermissionDenied("this task cannot be driven from here")
        if action == "pause":
            note = request.POST.get("note", "").strip()[:2000] or "from the admin"
            task_definitions.task_pause(task=task, note=note, paused_by=_admin_user(request))
        else:
            TASK_BUTTONS[action](task=task)
        self.message_user(request, f"{action.capitalize()}: {task.name}", messages.SUCCESS)
        return redirect("admin:scheduler_app_taskdefinition_change", task.pk)

    def render_change_form(self, request, context, *args, **kwargs):
        obj = context.get("original")
        context["task_buttons"] = (
            obj is not None and obj.pk and DAG_NODE_TAG not in (obj.tags or [])
        )
        return super().render_change_form(request, context, *args, **kwargs)

    def save_model(self, request: HttpRequest, obj: TaskDefinition, form, change: bool) -> None:
        """Admin edits go through the same service as the API, so validation and the
        scheduler's change feed behave the same whichever door was used."""
        spec = _spec_from_admin(obj)
        if change:
            current = TaskDefinition.platform.get(pk=obj.pk)
            task_definitions.task_update(task=current, spec=spec)
            if current.paused != obj.paused and obj.paused:
                task_definitions.task_pause(
                    task=current, note="from the admin", paused_by=_admin_user(request)
                )
            elif current.paused != obj.paused:
                task_definitions.task_resume(task=current)
        else:
            created = task_definitions.task_create(
                tenant=obj.tenant, spec=spec, created_by=request.user
            )
            obj.pk = created.pk

    def delete_model(self, request: HttpRequest, obj: TaskDefinition) -> None:
        task_definitions.task_delete(task=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[TaskDefinition]) -> None:
        for task in queryset:
            task_definitions.task_delete(task=task)

    @admin.action(description="Trigger now")
    def trigger_now(self, request: HttpRequest, queryset: QuerySet[TaskDefinition]) -> None:
        for task in queryset:
            task_definitions.task_trigger(task=task)
        self.message_user(request, f"Triggered {queryset.count()} task(s).", messages.SUCCESS)

    @admin.action(description="Pause schedule")
    def pause(self, request: HttpRequest, queryset: QuerySet[TaskDefinition]) -> None:
        for task in queryset:
            task_definitions.task_pause(
                task=task, paused_by=_admin_user(request), note="from the admin"
            )
        self.message_user(request, f"Paused {queryset.count()} task(s).", messages.SUCCESS)

    @admin.action(description="Resume schedule")
    def resume(self, request: HttpRequest, queryset: QuerySet[TaskDefinition]) -> None:
        for task in queryset:
            task_definitions.task_resume(task=task)
        self.message_user(request, f"Resumed {queryset.count()} task(s).", messages.SUCCESS)


@admin.register(TaskExecution)
class TaskExecutionAdmin(admin.ModelAdmin):
    # Chosen to fit a 1366 px screen: a short id (the full one is on the change form and
    # searchable), attempts as n/m, times to the second, the duration instead of two stamps.
    list_display = [
        "short_id",
        "task",
        "status",
        "trigger",
        "attempts",
        "scheduled",
        "duration",
        "worker_id",
        "error_class",
        "dead_lettered",
    ]
    list_filter = ["status", "trigger", "dead_lettered", "queue", "error_class", "tenant"]
    search_fields = ["id", "task__name", "worker_id", "error_message"]
    date_hierarchy = "scheduled_at"
    list_select_related = ["task"]
    actions = ["cancel_runs", "retry_dead_lettered", "dismiss_dead_lettered"]
    show_full_result_count = False  # COUNT(*) over a huge history on every page is too slow

    @admin.display(description="id", ordering="id")
    def short_id(self, obj: TaskExecution) -> str:
        return str(obj.id)[:8]

    @admin.display(description="attempt")
    def attempts(self, obj: TaskExecution) -> str:
        return f"{obj.attempt}/{obj.max_attempts}"

    @admin.display(description="scheduled (UTC)", ordering="scheduled_at")
    def scheduled(self, obj: TaskExecution) -> str:
        return _to_the_second(obj.scheduled_at)

    @admin.display(description="duration")
    def duration(self, obj: TaskExecution) -> str:
        if obj.started_at is None or obj.completed_at is None:
            return "–"
        return f"{(obj.completed_at - obj.started_at).total_seconds():.1f} s"

    def get_readonly_fields(
        self, request: HttpRequest, obj: TaskExecution | None = None
    ) -> list[str]:
        # Executions change only through services; the admin shows them.
        return [field.name for field in TaskExecution._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: TaskExecution | None = None) -> bool:
        return False

    @admin.action(description="Cancel (kill running, drop waiting)")
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[TaskExecution]) -> None:
        outcomes = []
        for execution in queryset.filter(status__in=["pending", "queued", "running"]):
            try:
                outcomes.append(execution_cancel(execution=execution))
            except Conflict:  # it ended meanwhile
                continue
        self.message_user(
            request,
            f"Cancelled {outcomes.count('cancelled')} waiting run(s); "
            f"told the workers of {outcomes.count('cancelling')} running one(s) to kill them.",
            messages.SUCCESS,
        )

    @admin.action(description="Retry dead-lettered runs")
    def retry_dead_lettered(self, request: HttpRequest, queryset: QuerySet[TaskExecution]) -> None:
        retried, refused = 0, []
        for execution in queryset.select_related("task").filter(dead_lettered=True):
            try:
                retried += (
                    dead_letters.dead_letter_retry(
                        execution=execution, triggered_by=f"user:{request.user.get_username()}"
                    )
                    is not None
                )
            except DomainError as error:  # a DAG node whose run is still going
                # Named as the run it is about (task or "DAG > node", fire time, short id):
                # the refusal's own words speak of the DAG run, which is another object.
                refused.append(f"{execution}: {error.message}")
        self.message_user(request, f"Retried {retried} dead-lettered run(s).", messages.SUCCESS)
        if refused:
            self.message_user(request, "Not retried: " + "; ".join(refused), messages.WARNING)

    @admin.action(description="Remove from the dead-letter queue")
    def dismiss_dead_lettered(
        self, request: HttpRequest, queryset: QuerySet[TaskExecution]
    ) -> None:
        removed = sum(
            1
            for execution in queryset.filter(dead_lettered=True)
            if dead_letters.dead_letter_delete(execution=execution)
        )
        self.message_user(request, f"Removed {removed} run(s) from the DLQ.", messages.SUCCESS)


@admin.register(ExecutionLog)
class ExecutionLogAdmin(admin.ModelAdmin):
    list_display = ["execution", "tenant", "size", "truncated", "created"]
    list_filter = ["truncated", "tenant"]
    search_fields = ["execution_id"]

    @admin.display(description="execution", ordering="execution_id")
    def execution(self, obj: ExecutionLog) -> str:
        return str(obj.execution_id)[:8]

    @admin.display(description="size", ordering="size_bytes")
    def size(self, obj: ExecutionLog) -> str:
        return filesizeformat(obj.size_bytes)

    @admin.display(description="created (UTC)", ordering="created_at")
    def created(self, obj: ExecutionLog) -> str:
        return _to_the_second(obj.created_at)

    readonly_fields = ["execution_id", "tenant", "text", "size_bytes", "truncated", "created_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ["created_at", "tenant", "actor", "action", "object_type", "object_id"]
    list_filter = ["action"]
    search_fields = ["actor", "action", "object_id"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Keys are created through the API (the key is shown once there); here: view, revoke."""

    list_display = ["name", "tenant", "role", "prefix", "last_used_at", "revoked_at"]
    readonly_fields = [
        "tenant",
        "name",
        "role",
        "prefix",
        "created_by",
        "created_at",
        "last_used_at",
    ]
    exclude = ["key_hash"]
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        for key in queryset:
            api_key_revoke(key=key)


@admin.register(Secret)
class SecretAdmin(admin.ModelAdmin):
    """Names only: values are managed through the API and never shown."""

    list_display = ["name", "tenant", "updated_at"]
    search_fields = ["name"]
    exclude = ["ciphertext"]
    readonly_fields = ["tenant", "name", "created_at", "updated_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
