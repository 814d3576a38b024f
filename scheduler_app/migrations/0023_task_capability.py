"""TaskDefinition.capability: what only some workers offer ("container", "egress"), stored
with the task so that the beat, the API and the DAG engine route its runs by a column.
Existing tasks get theirs from their handler, as the service computes it on every save."""

from django.db import migrations, models

FILL = """
UPDATE scheduler_app_taskdefinition SET capability = 'container' WHERE handler_type = 'container';
UPDATE scheduler_app_taskdefinition SET capability = 'egress'
 WHERE handler_type = 'shell' AND handler_config ->> 'network' = 'egress';
"""


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler_app", "0022_tenant_webhook_hosts"),
    ]

    operations = [
        migrations.AddField(
            model_name="taskdefinition",
            name="capability",
            field=models.CharField(blank=True, db_default="", default="", max_length=16),
        ),
        migrations.RunSQL(FILL, reverse_sql=migrations.RunSQL.noop),
    ]
