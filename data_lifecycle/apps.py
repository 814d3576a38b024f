from django.apps import AppConfig


class DataLifecycleConfig(AppConfig):
    name = "data_lifecycle"
    verbose_name = "Data lifecycle"
    default_auto_field = "django.db.models.BigAutoField"
