# The audit log's filters at scale: one object's history (object type and id) and one verb's
# entries, newest first within the tenant. Built without locking out the writes that audit.

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("scheduler_app", "0030_execution_trigger_rerun"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="auditentry",
            index=models.Index(
                fields=["tenant", "object_type", "object_id", "-id"],
                name="idx_audit_tenant_object",
            ),
        ),
        AddIndexConcurrently(
            model_name="auditentry",
            index=models.Index(fields=["tenant", "action", "-id"], name="idx_audit_tenant_action"),
        ),
    ]
