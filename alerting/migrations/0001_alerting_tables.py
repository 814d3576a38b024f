"""The alerting tables, adopted from scheduler_app as they are (state only: they already
exist, created by scheduler_app's 0003 and changed up to its 0017; scheduler_app's 0018
dropped them from its state). The content types follow the models, so permissions and admin
history granted on them stay attached.
"""

import uuid

import django.db.models.deletion
from django.db import migrations, models

MODELS = ("alertincident", "notificationchannel")


def _relabel(apps, old: str, new: str) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in MODELS:
        if not content_type.objects.filter(app_label=new, model=model).exists():
            content_type.objects.filter(app_label=old, model=model).update(app_label=new)


def content_types_forward(apps, schema_editor) -> None:
    _relabel(apps, "scheduler_app", "alerting")


def content_types_backward(apps, schema_editor) -> None:
    _relabel(apps, "alerting", "scheduler_app")


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
                    name="AlertIncident",
                    fields=[
                        ("id", models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                        ("rule", models.CharField(max_length=64)),
                        ("key", models.CharField(max_length=255)),
                        ("severity", models.CharField(default="warning", max_length=16)),
                        ("summary", models.TextField()),
                        ("value", models.FloatField(blank=True, null=True)),
                        ("opened_at", models.DateTimeField()),
                        ("resolved_at", models.DateTimeField(blank=True, null=True)),
                        ("tenant", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name="+", to="scheduler_app.tenant")),
                    ],
                    options={
                        "db_table": "scheduler_app_alertincident",
                        "ordering": ["-opened_at"],
                        "constraints": [models.UniqueConstraint(condition=models.Q(("resolved_at__isnull", True)), fields=("rule", "key"), name="uniq_open_incident")],
                    },
                ),
                migrations.CreateModel(
                    name="NotificationChannel",
                    fields=[
                        ("id", models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                        ("name", models.SlugField(max_length=63)),
                        ("kind", models.CharField(choices=[("webhook", "Webhook"), ("slack", "Slack"), ("email", "Email"), ("pagerduty", "Pagerduty")], max_length=16)),
                        ("target", models.CharField(max_length=1000)),
                        ("signing_secret_ciphertext", models.TextField(blank=True, default="")),
                        ("credential_ciphertext", models.TextField(blank=True, default="")),
                        ("alerts", models.BooleanField(default=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("tenant", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="channels", to="scheduler_app.tenant")),
                    ],
                    options={
                        "db_table": "scheduler_app_notificationchannel",
                        "ordering": ["name"],
                        "constraints": [models.UniqueConstraint(fields=("tenant", "name"), name="uniq_channel_name_per_tenant")],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_types_forward, content_types_backward, elidable=True),
    ]
