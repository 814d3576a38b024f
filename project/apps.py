"""The project as an app of its own, last in INSTALLED_APPS: what is wired across the apps
once all of them are loaded (the deploy checks, which read every app's settings; tracing,
when an OTLP endpoint is set)."""

from django.apps import AppConfig


class ProjectConfig(AppConfig):
    name = "project"
    verbose_name = "Project"

    def ready(self) -> None:
        # Local: checks register themselves on import, once the app registry is ready.
        from project import checks  # noqa: F401, PLC0415
        from project.tracing_boot import tracing_boot  # noqa: PLC0415

        tracing_boot()
