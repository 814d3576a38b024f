from django.apps import AppConfig


class ApiConfig(AppConfig):
    """The REST API (DRF): views, serializers, permissions; no models of its own."""

    name = "api"
    verbose_name = "REST API"

    def ready(self) -> None:
        # Local: the lockout audit's receivers register themselves on import.
        from api import login_throttle  # noqa: F401, PLC0415
