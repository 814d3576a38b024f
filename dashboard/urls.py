from django.contrib.auth import views as auth_views
from django.urls import include, path

from dashboard import (
    actions,
    audit_page,
    backfill_dialog,
    backfill_pages,
    channel_pages,
    dlq,
    incident_pages,
    join,
    logs,
    members,
    runs,
    schedule_preview,
    sizing_page,
    sso,
    task_edit,
    task_list,
    trigger_pages,
    views,
)

app_name = "dashboard"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("login/", sso.DashboardLoginView.as_view(), name="login"),
    # Single sign-on (dashboard/sso.py): 404 without OIDC_ISSUER. The callback is the
    # redirect URI registered at the provider.
    path("sso/login", sso.ProviderLoginStartView.as_view(), name="sso-login"),
    path("sso/callback", sso.ProviderLoginCallbackView.as_view(), name="sso-callback"),
    path("logout/", auth_views.LogoutView.as_view(next_page="/dashboard/login/"), name="logout"),
    path("runs", runs.runs, name="runs"),
    path("tasks", task_list.tasks, name="tasks"),
    path("schedule-preview", schedule_preview.schedule_preview, name="schedule-preview"),
    # Before the task routes below, which would take "new" for an id and "edit" for an action.
    path("tasks/new", task_edit.task_new, name="task-new"),
    path("tasks/<str:task_id>/edit", task_edit.task_edit, name="task-edit"),
    path(
        "tasks/<str:task_id>/trigger/parameters",
        trigger_pages.task_trigger_page,
        name="task-trigger-parameters",
    ),
    path("tasks/<str:task_id>", views.task_detail, name="task"),
    # Before the action route, which would take "backfill" for an action.
    path(
        "tasks/<str:task_id>/backfill", backfill_dialog.task_backfill_new, name="task-backfill-new"
    ),
    path("tasks/<str:task_id>/<str:action>", actions.task_action, name="task-action"),
    path("executions/<str:execution_id>", views.execution_detail, name="execution"),
    # Before the catch-all action route below, which would take "log" for an action.
    path(
        "executions/<str:execution_id>/log-events",
        logs.execution_log_events,
        name="execution-log-events",
    ),
    path("executions/<str:execution_id>/log", logs.execution_log_text, name="execution-log"),
    path(
        "executions/<str:execution_id>/<str:action>",
        actions.execution_action,
        name="execution-action",
    ),
    # Public: an invitation's link, and the page that accepts it (join.py).
    path("join/<str:token>", join.join_with_token, name="join-token"),
    path("join", join.join, name="join"),
    path("members", members.member_list, name="members"),
    path(
        "members/invitations/<str:invitation_id>/revoke",
        members.invitation_revoke,
        name="invitation-revoke",
    ),
    path("workers", views.workers, name="workers"),
    path("dlq", dlq.dead_letter_page, name="dlq"),
    # Before the row action route below, which would take "bulk" for an id.
    path("dlq/bulk/<str:action>", dlq.dead_letter_bulk, name="dlq-bulk"),
    path("dlq/<str:execution_id>/<str:action>", actions.dead_letter_action, name="dlq-action"),
    path("missed", views.missed_schedules, name="missed"),
    path("sizing", sizing_page.overprovisioned, name="sizing"),
    path("channels", channel_pages.channel_list, name="channels"),
    path(
        "channels/<str:channel_id>/<str:action>",
        channel_pages.channel_action,
        name="channel-action",
    ),
    path("audit", audit_page.audit_log, name="audit"),
    path("incidents", incident_pages.incident_list, name="incidents"),
    path(
        "incidents/<str:incident_id>/<str:action>",
        incident_pages.incident_action,
        name="incident-action",
    ),
    path("backfills", backfill_pages.backfill_list, name="backfills"),
    path(
        "backfills/<str:backfill_id>/cancel",
        backfill_pages.backfill_cancel,
        name="backfill-cancel",
    ),
    # The DAG pages live with the DAGs (dashboard/dags/), in this namespace.
    path("", include("dashboard.dags.urls")),
]
