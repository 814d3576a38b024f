from django.apps import AppConfig


class DagsConfig(AppConfig):
    name = "dags"
    verbose_name = "DAGs"
    default_auto_field = "django.db.models.BigAutoField"
