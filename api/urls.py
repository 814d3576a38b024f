from django.urls import path

from api import (
    views,
    views_access,
    views_auth,
    views_channels,
    views_incidents,
    views_invitations,
    views_operations,
    views_pools,
    views_reruns,
    views_stats,
    views_usage,
)

urlpatterns = [
    path("auth/token", views_auth.TokenObtainView.as_view(), name="token-obtain"),
    path("auth/token/refresh", views_auth.TokenRefreshRotatingView.as_view(), name="token-refresh"),
    path("auth/logout", views_auth.LogoutView.as_view(), name="token-logout"),
    path("tasks", views.TaskListView.as_view(), name="task-list"),
    path("tasks/<str:task_id>", views.TaskDetailView.as_view(), name="task-detail"),
    path("tasks/<str:task_id>/trigger", views.TaskTriggerView.as_view(), name="task-trigger"),
    path("tasks/<str:task_id>/pause", views.TaskPauseView.as_view(), name="task-pause"),
    path("tasks/<str:task_id>/resume", views.TaskResumeView.as_view(), name="task-resume"),
    path("tasks/<str:task_id>/stats", views_stats.TaskStatsView.as_view(), name="task-stats"),
    path(
        "tasks/<str:task_id>/executions",
        views.TaskExecutionsView.as_view(),
        name="task-executions",
    ),
    path(
        "tasks/<str:task_id>/schedule-preview",
        views.TaskSchedulePreviewView.as_view(),
        name="task-schedule-preview",
    ),
    path("executions", views_operations.ExecutionListView.as_view(), name="execution-list"),
    path(
        "executions/<str:execution_id>/retry",
        views_operations.ExecutionRetryView.as_view(),
        name="execution-retry",
    ),
    path(
        "executions/<str:execution_id>/rerun",
        views_reruns.ExecutionRerunView.as_view(),
        name="execution-rerun",
    ),
    path(
        "executions/<str:execution_id>",
        views.ExecutionDetailView.as_view(),
        name="execution-detail",
    ),
    path(
        "executions/<str:execution_id>/checkpoint",
        views_usage.ExecutionCheckpointView.as_view(),
        name="execution-checkpoint",
    ),
    path(
        "tasks/<str:task_id>/resource-usage",
        views_usage.TaskResourceUsageView.as_view(),
        name="task-resource-usage",
    ),
    path(
        "sizing/overprovisioned",
        views_usage.OverprovisionedTasksView.as_view(),
        name="sizing-overprovisioned",
    ),
    path(
        "executions/<str:execution_id>/logs",
        views.ExecutionLogsView.as_view(),
        name="execution-logs",
    ),
    path(
        "executions/<str:execution_id>/cancel",
        views.ExecutionCancelView.as_view(),
        name="execution-cancel",
    ),
    path("admin/workers", views.AdminWorkersView.as_view(), name="admin-workers"),
    path("admin/queues", views.AdminQueuesView.as_view(), name="admin-queues"),
    path("admin/dlq", views.DeadLetterListView.as_view(), name="dlq-list"),
    path("admin/dlq/retry-all", views.DeadLetterRetryAllView.as_view(), name="dlq-retry-all"),
    path("admin/dlq/<str:execution_id>", views.DeadLetterDetailView.as_view(), name="dlq-detail"),
    path(
        "admin/dlq/<str:execution_id>/retry",
        views.DeadLetterRetryView.as_view(),
        name="dlq-retry",
    ),
    path("admin/metrics", views_operations.AdminMetricsView.as_view(), name="admin-metrics"),
    path(
        "admin/scheduler/status",
        views_operations.SchedulerStatusView.as_view(),
        name="scheduler-status",
    ),
    path(
        "admin/scheduler/failover",
        views_operations.SchedulerFailoverView.as_view(),
        name="scheduler-failover",
    ),
    path("audit", views_access.AuditListView.as_view(), name="audit-list"),
    path("tenant/usage", views_access.TenantUsageView.as_view(), name="tenant-usage"),
    path("pools", views_pools.PoolListView.as_view(), name="pool-list"),
    path("pools/<str:name>", views_pools.PoolDetailView.as_view(), name="pool-detail"),
    path("secrets", views_access.SecretListView.as_view(), name="secret-list"),
    path("secrets/<str:secret_id>", views_access.SecretDetailView.as_view(), name="secret-detail"),
    path("api-keys", views_access.ApiKeyListView.as_view(), name="apikey-list"),
    path("api-keys/<str:key_id>", views_access.ApiKeyDetailView.as_view(), name="apikey-detail"),
    path("channels", views_channels.ChannelListView.as_view(), name="channel-list"),
    path(
        "channels/<str:channel_id>",
        views_channels.ChannelDetailView.as_view(),
        name="channel-detail",
    ),
    path(
        "channels/<str:channel_id>/test",
        views_channels.ChannelTestView.as_view(),
        name="channel-test",
    ),
    path("incidents", views_incidents.IncidentListView.as_view(), name="incident-list"),
    path(
        "incidents/<str:incident_id>",
        views_incidents.IncidentDetailView.as_view(),
        name="incident-detail",
    ),
    path(
        "incidents/<str:incident_id>/acknowledge",
        views_incidents.IncidentAcknowledgeView.as_view(),
        name="incident-acknowledge",
    ),
    path(
        "incidents/<str:incident_id>/resolve",
        views_incidents.IncidentResolveView.as_view(),
        name="incident-resolve",
    ),
    path("members", views_access.MemberListView.as_view(), name="member-list"),
    # Before members/<member_id>, which would take "invitations" for an id.
    path(
        "members/invitations",
        views_invitations.TenantInvitationListView.as_view(),
        name="invitation-list",
    ),
    path(
        "members/invitations/<str:invitation_id>",
        views_invitations.TenantInvitationDetailView.as_view(),
        name="invitation-detail",
    ),
    # Public: the token in the body is the credential.
    path(
        "invitations/accept",
        views_invitations.InvitationAcceptView.as_view(),
        name="invitation-accept",
    ),
    path("members/<str:member_id>", views_access.MemberDetailView.as_view(), name="member-detail"),
]
