"""The data-lifecycle tables, adopted from scheduler_app as they are (state only: they
already exist, created by scheduler_app's 0004, renamed for the admin in its 0009;
scheduler_app's 0018 dropped them from its state). The content types follow the models, so
permissions and admin history granted on them stay attached.
"""

from django.db import migrations, models

MODELS = ("restoredexecution", "taskstats")


def _relabel(apps, old: str, new: str) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in MODELS:
        if not content_type.objects.filter(app_label=new, model=model).exists():
            content_type.objects.filter(app_label=old, model=model).update(app_label=new)


def content_types_forward(apps, schema_editor) -> None:
    _relabel(apps, "scheduler_app", "data_lifecycle")


def content_types_backward(apps, schema_editor) -> None:
    _relabel(apps, "data_lifecycle", "scheduler_app")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("scheduler_app", "0018_alerting_and_data_lifecycle_move_out"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="RestoredExecution",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("execution_id", models.UUIDField(db_index=True)),
                        ("tenant_id", models.UUIDField(db_index=True)),
                        ("task_id", models.UUIDField(db_index=True)),
                        ("status", models.CharField(max_length=16)),
                        ("scheduled_at", models.DateTimeField()),
                        ("attempt", models.PositiveSmallIntegerField(default=1)),
                        ("row", models.JSONField()),
                        ("source", models.CharField(db_index=True, max_length=512)),
                        ("restored_at", models.DateTimeField(auto_now_add=True)),
                    ],
                    options={
                        "db_table": "scheduler_app_restoredexecution",
                        "ordering": ["-scheduled_at"],
                    },
                ),
                migrations.CreateModel(
                    name="TaskStats",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("tenant_id", models.UUIDField()),
                        ("task_id", models.UUIDField(blank=True, null=True)),
                        ("bucket", models.CharField(choices=[("hour", "Hour"), ("day", "Day")], max_length=8)),
                        ("bucket_start", models.DateTimeField()),
                        ("total", models.IntegerField(default=0)),
                        ("by_status", models.JSONField(default=dict)),
                        ("duration_p50", models.FloatField(null=True)),
                        ("duration_p95", models.FloatField(null=True)),
                        ("duration_p99", models.FloatField(null=True)),
                        ("lag_p50", models.FloatField(null=True)),
                        ("lag_p95", models.FloatField(null=True)),
                        ("lag_p99", models.FloatField(null=True)),
                        ("refreshed_at", models.DateTimeField()),
                    ],
                    options={
                        "verbose_name": "task stats",
                        "verbose_name_plural": "task stats",
                        "db_table": "scheduler_app_taskstats",
                        "indexes": [models.Index(fields=["bucket", "bucket_start"], name="idx_stats_bucket_start"), models.Index(fields=["tenant_id", "bucket", "task_id", "bucket_start"], name="idx_stats_tenant")],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_types_forward, content_types_backward, elidable=True),
    ]
