from django.contrib.auth import views as auth_views
from django.urls import path

from scheduler_app.dashboard import actions, views

app_name = "dashboard"

urlpatterns = [
    path("", views.overview, name="overview"),
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="dashboard/login.html"),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(next_page="/dashboard/login/"), name="logout"),
    path("tasks/<str:task_id>", views.task_detail, name="task"),
    path("tasks/<str:task_id>/<str:action>", actions.task_action, name="task-action"),
    path("executions/<str:execution_id>", views.execution_detail, name="execution"),
    path(
        "executions/<str:execution_id>/<str:action>",
        actions.execution_action,
        name="execution-action",
    ),
    path("workers", views.workers, name="workers"),
    path("dlq", views.dead_letters, name="dlq"),
    path("dlq/<str:execution_id>/<str:action>", actions.dead_letter_action, name="dlq-action"),
    path("missed", views.missed_schedules, name="missed"),
]
