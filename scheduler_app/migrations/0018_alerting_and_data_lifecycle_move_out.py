"""Alerting (NotificationChannel, AlertIncident) and the data lifecycle (TaskStats,
RestoredExecution) became apps of their own. Only Django's model state moves: the tables
keep their names (the new models set Meta.db_table), so nothing in the database changes.
The new apps adopt the models in their 0001, which runs after this one.
"""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("scheduler_app", "0017_log_words_by_tenant_and_time"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="AlertIncident"),
                migrations.DeleteModel(name="NotificationChannel"),
                migrations.DeleteModel(name="RestoredExecution"),
                migrations.DeleteModel(name="TaskStats"),
            ],
            database_operations=[],
        ),
    ]
