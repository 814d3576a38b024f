from django.core.management.base import BaseCommand

from scheduler_app.services.demo import demo_seed


class Command(BaseCommand):
    help = "Create the demo tenant, its admin user and a few example tasks (idempotent)."

    def handle(self, *args: object, **options: object) -> None:
        tenant, username, password = demo_seed()
        self.stdout.write(f"tenant {tenant.slug}: user {username} / password {password}")
