from django.apps import AppConfig


class SchedulerAppConfig(AppConfig):
    name = "scheduler_app"
    verbose_name = "Scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from scheduler_app import checks  # noqa: F401  (registrations)
        from scheduler_app.api import login_throttle  # noqa: F401  (the lockout audit receiver)
