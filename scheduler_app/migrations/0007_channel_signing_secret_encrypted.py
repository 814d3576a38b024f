"""Notification channel signing secrets: encrypt the existing plaintext values with the
secrets cipher (SECRETS_KEY), then drop the plaintext column."""

from django.db import migrations, models


def encrypt_existing(apps, schema_editor):
    from scheduler_app.services.secrets import cipher

    channel_model = apps.get_model("scheduler_app", "NotificationChannel")
    fernet = cipher()
    for channel in channel_model.objects.exclude(signing_secret="").iterator(chunk_size=500):
        channel_model.objects.filter(id=channel.id).update(
            signing_secret_ciphertext=fernet.encrypt(channel.signing_secret.encode()).decode()
        )


def decrypt_existing(apps, schema_editor):
    from scheduler_app.services.secrets import cipher

    channel_model = apps.get_model("scheduler_app", "NotificationChannel")
    fernet = cipher()
    for channel in channel_model.objects.exclude(signing_secret_ciphertext="").iterator(
        chunk_size=500
    ):
        channel_model.objects.filter(id=channel.id).update(
            signing_secret=fernet.decrypt(channel.signing_secret_ciphertext.encode()).decode()
        )


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler_app", "0006_scheduling_policies"),
    ]

    operations = [
        migrations.AddField(
            model_name="notificationchannel",
            name="signing_secret_ciphertext",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.RunPython(encrypt_existing, decrypt_existing),
        migrations.RemoveField(
            model_name="notificationchannel",
            name="signing_secret",
        ),
    ]
