"""`django.contrib.admin` with the audited site as `admin.site` (Django's own hook for a
project's default site; site_admin/audited.py). Its own module: INSTALLED_APPS imports it
before the models are loaded."""

from django.contrib.admin.apps import AdminConfig


class AuditedAdminConfig(AdminConfig):
    default_site = "site_admin.audited.AuditedAdminSite"
