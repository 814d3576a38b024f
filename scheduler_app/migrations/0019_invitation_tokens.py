# Invitations become single-use tokens (only their SHA-256 stored) that name no account.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def drop_name_bound_invitations(apps, schema_editor):
    """Pending invitations of the old kind were addressed to a user name and hold no token:
    none can be made safe (that binding was the takeover), so they go; admins invite again."""
    apps.get_model("scheduler_app", "MemberInvitation").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler_app", "0018_alerting_and_data_lifecycle_move_out"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RunPython(drop_name_bound_invitations, migrations.RunPython.noop),
        migrations.AlterModelOptions(
            name="memberinvitation",
            options={"ordering": ["-created_at"]},
        ),
        migrations.RemoveConstraint(
            model_name="memberinvitation",
            name="uniq_invitation_tenant_username",
        ),
        migrations.RemoveField(model_name="memberinvitation", name="user"),
        migrations.RemoveField(model_name="memberinvitation", name="username"),
        migrations.AddField(
            model_name="memberinvitation",
            name="accepted_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="memberinvitation",
            name="accepted_by",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="memberinvitation",
            name="email",
            field=models.EmailField(blank=True, default="", max_length=254),
        ),
        migrations.AddField(
            model_name="memberinvitation",
            name="revoked_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        # The table is empty (above): the default fills no row.
        migrations.AddField(
            model_name="memberinvitation",
            name="token_hash",
            field=models.CharField(default="", max_length=64),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="memberinvitation",
            name="token_prefix",
            field=models.CharField(default="", max_length=16, unique=True),
            preserve_default=False,
        ),
        migrations.AddIndex(
            model_name="memberinvitation",
            index=models.Index(fields=["tenant", "-created_at"], name="idx_invitation_tenant"),
        ),
    ]
