from django.apps import AppConfig


class DagsConfig(AppConfig):
    name = "dags"
    verbose_name = "DAGs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from dags.housekeeping import chores_register  # noqa: PLC0415  (the registry is ready)

        chores_register()
