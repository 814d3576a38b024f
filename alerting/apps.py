from django.apps import AppConfig


class AlertingConfig(AppConfig):
    name = "alerting"
    verbose_name = "Alerting"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Local: the app registry is ready.
        from alerting import checks  # noqa: F401, PLC0415  (registers the system checks)
        from alerting.beat_hook import chores_register  # noqa: PLC0415
        from alerting.services.owners import task_owner_check  # noqa: PLC0415
        from alerting.services.targets import task_notifications_check  # noqa: PLC0415
        from alerting.tasks import approval_wait_started, dag_streak_crossed  # noqa: PLC0415
        from dags.engine.approval_waits import approval_wait_listener_register  # noqa: PLC0415
        from dags.engine.failure_streaks import dag_streak_listener_register  # noqa: PLC0415
        from scheduler_app.task_checks import task_check_register  # noqa: PLC0415

        chores_register()
        task_check_register("notification-targets", task_notifications_check)
        task_check_register("owner", task_owner_check)
        dag_streak_listener_register("runbook", dag_streak_crossed)
        approval_wait_listener_register("announce", approval_wait_started)
