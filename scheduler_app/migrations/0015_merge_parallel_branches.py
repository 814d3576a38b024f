"""Joins the migrations written side by side on parallel branches (no operations)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler_app", "0009_admin_plural_names"),
        ("scheduler_app", "0009_member_invitations"),
        ("scheduler_app", "0009_tenant_shell_egress_allowed"),
        ("scheduler_app", "0010_task_idempotency_keys"),
        ("scheduler_app", "0014_execution_log_word_search"),
    ]

    operations = []
