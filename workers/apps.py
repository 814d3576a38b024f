from importlib import import_module

from django.apps import AppConfig
from django.conf import settings


class WorkersConfig(AppConfig):
    name = "workers"
    verbose_name = "Workers"

    def ready(self) -> None:
        # Python handlers register themselves on import; the web process needs the names
        # too, to refuse a task whose callable does not exist.
        for module in settings.PYTHON_HANDLER_MODULES:
            import_module(module)
        # Celery worker signal receivers (heartbeats, sticky queue, drain); inert elsewhere.
        import_module("workers.fleet_membership")
        # Every worker process makes itself undumpable (its environment holds the keys).
        import_module("workers.hardening")
