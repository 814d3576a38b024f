"""Range-partition the executions table by month of `scheduled_at`.

Works on a fresh database and on one that already holds rows (they are copied into their
monthly partitions). Reversing leaves the partitioned table in
place (it behaves the same for Django), so going back past this migration is safe.
"""

from django.db import migrations
from django.utils import timezone


def partition(apps, schema_editor):
    from scheduler_app.partitions import table_convert_to_partitioned

    table_convert_to_partitioned(schema_editor.connection, now=timezone.now())


class Migration(migrations.Migration):
    dependencies = [("scheduler_app", "0004_data_lifecycle")]

    operations = [migrations.RunPython(partition, migrations.RunPython.noop, elidable=False)]
