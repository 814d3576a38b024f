# Per-tenant rolling budgets (scheduler_app.services.rolling_budgets) count here: the bytes
# of event payloads and trigger parameters, the mails of notifications. A new, empty table.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("scheduler_app", "0020_log_words_column"),
    ]

    operations = [
        migrations.CreateModel(
            name="BudgetUsage",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("budget", models.CharField(max_length=32)),
                ("bucket_start", models.DateTimeField()),
                ("amount", models.BigIntegerField(default=0)),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="scheduler_app.tenant",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tenant", "budget", "bucket_start"),
                        name="uniq_budget_usage_slice",
                    )
                ],
            },
        ),
    ]
