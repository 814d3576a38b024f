from django.apps import AppConfig


class SchedulerAppConfig(AppConfig):
    name = "scheduler_app"
    verbose_name = "Scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # App loading: the services import the models, which need the app registry.
        from scheduler_app.flow_housekeeping import flow_chores_register  # noqa: PLC0415

        flow_chores_register()
