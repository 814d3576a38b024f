from django.apps import AppConfig


class AlertingConfig(AppConfig):
    name = "alerting"
    verbose_name = "Alerting"
    default_auto_field = "django.db.models.BigAutoField"
