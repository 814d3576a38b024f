from django.apps import AppConfig


class DevstackConfig(AppConfig):
    """`make run`'s local stack (`manage.py runstack`): embedded PostgreSQL and Redis, the
    processes of the stack; development tooling, no part of a deployment's run path."""

    name = "devstack"
    verbose_name = "Local stack"
