from django.apps import AppConfig


class SiteAdminConfig(AppConfig):
    """The operator's Django admin for the core's models (tenants, tasks, runs, members)."""

    name = "site_admin"
    verbose_name = "Site admin"
