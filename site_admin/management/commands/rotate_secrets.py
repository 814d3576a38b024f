"""Re-encrypt every tenant secret and channel signing secret with the first key of SECRETS_KEY.

Rotation: generate a key (`python -c "from cryptography.fernet import Fernet;
print(Fernet.generate_key().decode())"`), set SECRETS_KEY=new,old everywhere, run this
command, then remove the old key.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from alerting.services.channels import channel_secrets_rotate
from scheduler_app.services.secrets import secrets_rotate


class Command(BaseCommand):
    help = "Re-encrypt all secrets with the primary (first) SECRETS_KEY."

    def handle(self, *args, **options) -> None:
        rotated = secrets_rotate()
        channels = channel_secrets_rotate()
        self.stdout.write(
            self.style.SUCCESS(
                f"re-encrypted {rotated} secret(s) and {channels} channel signing secret(s)"
            )
        )
