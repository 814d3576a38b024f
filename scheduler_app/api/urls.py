from django.urls import path
from rest_framework_simplejwt.views import TokenObtainPairView, TokenRefreshView

from scheduler_app.api import views

urlpatterns = [
    path("auth/token", TokenObtainPairView.as_view(), name="token-obtain"),
    path("auth/token/refresh", TokenRefreshView.as_view(), name="token-refresh"),
    path("tasks", views.TaskListView.as_view(), name="task-list"),
    path("tasks/<str:task_id>", views.TaskDetailView.as_view(), name="task-detail"),
    path("tasks/<str:task_id>/trigger", views.TaskTriggerView.as_view(), name="task-trigger"),
    path("tasks/<str:task_id>/pause", views.TaskPauseView.as_view(), name="task-pause"),
    path("tasks/<str:task_id>/resume", views.TaskResumeView.as_view(), name="task-resume"),
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
    path(
        "executions/<str:execution_id>",
        views.ExecutionDetailView.as_view(),
        name="execution-detail",
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
]
