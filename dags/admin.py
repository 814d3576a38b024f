"""Admin for DAGs: the definition is edited as JSON and saved through the services
(validated exactly like the API), runs show every node, and runs can be cancelled or re-run."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from dags.models import Dag, DagNodeAttempt, DagNodeState, DagRun, DagVersion
from dags.services import definitions, runs
from scheduler_app.errors import DomainError


class DagForm(forms.ModelForm):
    definition = forms.JSONField(
        help_text='{"dag": "name", "tasks": [{"id": "a", "handler": {...}}, ...]}'
    )

    class Meta:
        model = Dag
        fields = ["tenant"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.instance._state.adding:
            version = definitions.current_version(self.instance)
            self.fields["definition"].initial = version.spec if version else None
            self.fields["tenant"].disabled = True

    def clean(self):
        cleaned = super().clean()
        try:
            if not self.instance._state.adding:
                self.instance = definitions.dag_update(
                    dag=self.instance, raw=cleaned.get("definition")
                )
            elif cleaned.get("tenant"):
                self.instance = definitions.dag_create(
                    tenant=cleaned["tenant"], raw=cleaned.get("definition")
                )
        except DomainError as error:
            raise forms.ValidationError({"definition": error.message}) from error
        return cleaned


class DagVersionInline(admin.TabularInline):
    model = DagVersion
    extra = 0
    can_delete = False
    fields = ["number", "created_at", "spec"]
    readonly_fields = fields


@admin.register(Dag)
class DagAdmin(admin.ModelAdmin):
    form = DagForm
    list_display = [
        "name",
        "tenant",
        "version",
        "schedule_type",
        "paused",
        "paused_by",
        "next_fire_at",
    ]
    list_filter = ["tenant", "paused", "schedule_type"]
    search_fields = ["name"]
    # The pause record and the runbook's counter: written by the pause and the runbook only.
    readonly_fields = [
        "paused",
        "paused_at",
        "paused_by",
        "pause_note",
        "owner",
        "consecutive_failures",
        "remaining_runs",
    ]
    inlines = [DagVersionInline]
    actions = ["trigger_now", "pause", "resume"]

    def save_model(self, request, obj, form, change) -> None:
        """The form's clean() already saved it through the services."""

    def save_related(self, request, form, formsets, change) -> None:
        """Versions are written by the services only (the inline is read-only)."""
        for formset in formsets:
            formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []

    def delete_model(self, request: HttpRequest, obj: Dag) -> None:
        definitions.dag_delete(dag=obj)

    @admin.action(description="Trigger a run now")
    def trigger_now(self, request: HttpRequest, queryset: QuerySet[Dag]) -> None:
        for dag in queryset:
            runs.dag_trigger(dag=dag)
        messages.success(request, f"triggered {queryset.count()} DAG(s)")

    @admin.action(description="Pause schedule")
    def pause(self, request: HttpRequest, queryset: QuerySet[Dag]) -> None:
        """Recorded as paused by the admin user (a DAG already paused keeps its record)."""
        for dag in queryset:
            definitions.dag_set_paused(
                dag=dag,
                paused=True,
                note="from the admin",
                paused_by=f"user:{request.user.get_username()}",
            )
        messages.success(request, f"paused {queryset.count()} DAG(s)")

    @admin.action(description="Resume schedule")
    def resume(self, request: HttpRequest, queryset: QuerySet[Dag]) -> None:
        for dag in queryset:
            definitions.dag_set_paused(dag=dag, paused=False)
        messages.success(request, f"resumed {queryset.count()} DAG(s)")


class NodeInline(admin.TabularInline):
    model = DagNodeState
    extra = 0
    can_delete = False
    fields = [
        "node_id",
        "status",
        "remaining_upstream",
        "attempts",
        "attempt_number",
        "attempt_trigger",
        "attempt_triggered_by",
        "map_total",
        "map_finished",
        "execution_id",
        "result",
        "error_message",
        "completed_at",
    ]
    readonly_fields = fields


class NodeAttemptInline(admin.TabularInline):
    """Earlier attempts of re-run nodes (written by the re-run; never edited)."""

    model = DagNodeAttempt
    extra = 0
    can_delete = False
    verbose_name = "earlier attempt of a re-run node"
    fields = [
        "node_id",
        "number",
        "trigger",
        "triggered_by",
        "status",
        "execution_id",
        "execution_attempts",
        "started_at",
        "completed_at",
        "error_message",
    ]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(DagRun)
class DagRunAdmin(admin.ModelAdmin):
    list_display = ["id", "dag", "status", "trigger", "scheduled_at", "completed_at"]
    list_filter = ["status", "trigger"]
    readonly_fields = [
        "tenant",
        "dag",
        "version",
        "status",
        "trigger",
        "scheduled_at",
        "parameters",
        "remaining_nodes",
        "started_at",
        "completed_at",
    ]
    exclude = ["created_at"]
    inlines = [NodeInline, NodeAttemptInline]
    actions = ["cancel_runs", "rerun_failed"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Cancel the selected runs")
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[DagRun]) -> None:
        for run in queryset:
            try:
                runs.dag_run_cancel(run=run)
            except DomainError as error:
                messages.warning(request, f"{run.id}: {error.message}")

    @admin.action(description="Re-run from the failed nodes")
    def rerun_failed(self, request: HttpRequest, queryset: QuerySet[DagRun]) -> None:
        for run in queryset:
            try:
                runs.dag_run_rerun(run=run, triggered_by=f"user:{request.user.get_username()}")
            except DomainError as error:
                messages.warning(request, f"{run.id}: {error.message}")
