from django.apps import AppConfig


class SchedulerAppConfig(AppConfig):
    name = "scheduler_app"
    verbose_name = "Scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Local: Django loads these once the app registry is ready (checks and receivers
        # register themselves on import).
        from scheduler_app import checks  # noqa: F401, PLC0415
        from scheduler_app.api import login_throttle  # noqa: F401, PLC0415  (lockout audit)
