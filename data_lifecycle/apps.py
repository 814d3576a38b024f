from django.apps import AppConfig


class DataLifecycleConfig(AppConfig):
    name = "data_lifecycle"
    verbose_name = "Data lifecycle"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from data_lifecycle.beat_hook import chores_register  # noqa: PLC0415

        chores_register()
