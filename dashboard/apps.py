from django.apps import AppConfig


class DashboardConfig(AppConfig):
    """The web dashboard: pages, templates, static files; no models of its own."""

    name = "dashboard"
    verbose_name = "Dashboard"
