# Log search at 10M runs: a newest-first search reads a recent window of one tenant's logs
# (api.log_search_pages), found through this index on the tenant and the hour
# the log was written, in one bitmap with the words' index. Built without locking out the
# writes of finishing runs. (No btree_gin: the embedded PostgreSQL does not ship it.)

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

import scheduler_app.models.execution


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("scheduler_app", "0016_task_idempotency_key_db_default"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="executionlog",
            index=models.Index(
                models.F("tenant"),
                scheduler_app.models.execution.LogHour("created_at"),
                name="idx_log_tenant_hour",
            ),
        ),
    ]
