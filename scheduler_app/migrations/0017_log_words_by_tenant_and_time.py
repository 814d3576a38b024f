# Log search at 10M runs: the word index also holds the tenant and the log's
# hour (btree_gin), so a newest-first search reads a recent window of one tenant's logs
# (scheduler_app.log_search). It replaces the word-only index; both are built and dropped
# without locking out the writes of finishing runs.

import django.contrib.postgres.indexes
import django.contrib.postgres.search
import django.db.models.functions.text
from django.contrib.postgres.operations import (
    AddIndexConcurrently,
    BtreeGinExtension,
    RemoveIndexConcurrently,
)
from django.db import migrations, models

import scheduler_app.models.execution


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("scheduler_app", "0016_task_idempotency_key_db_default"),
    ]

    operations = [
        # A trusted extension (PostgreSQL 13+): the database owner may create it.
        BtreeGinExtension(),
        AddIndexConcurrently(
            model_name="executionlog",
            index=django.contrib.postgres.indexes.GinIndex(
                models.F("tenant"),
                scheduler_app.models.execution.LogHour("created_at"),
                django.contrib.postgres.search.SearchVector(
                    django.db.models.functions.text.Left("text", 262144), config="simple"
                ),
                name="idx_log_words_by_time",
            ),
        ),
        RemoveIndexConcurrently(model_name="executionlog", name="idx_log_words"),
    ]
