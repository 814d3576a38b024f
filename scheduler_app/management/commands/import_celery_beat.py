"""Import django-celery-beat periodic tasks as task definitions with a `celery` handler.

python manage.py import_celery_beat --tenant SLUG [--dry-run] [--from-url DATABASE_URL]
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from scheduler_app.models import Tenant
from scheduler_app.services.celery_beat_import import celery_beat_import, read_periodic_tasks


class Command(BaseCommand):
    help = "Turn every django-celery-beat PeriodicTask into a task definition (celery handler)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tenant", required=True, help="slug of the tenant to import into")
        parser.add_argument("--dry-run", action="store_true", help="show the plan, change nothing")
        parser.add_argument(
            "--from-url",
            help="database holding the django_celery_beat_* tables (default: this one); "
            "postgres://... or sqlite:///path",
        )

    def handle(self, *args, **options) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        try:
            rows = read_periodic_tasks(options["from_url"])
        except Exception as error:  # whatever the driver raises, say which source failed
            raise CommandError(f"could not read django-celery-beat tables: {error}") from error
        report = celery_beat_import(tenant=tenant, rows=rows, dry_run=options["dry_run"])
        verb = "would create" if options["dry_run"] else "created"
        for planned in report.planned:
            schedule = planned.spec["schedule"]
            when = schedule.get("expression") or schedule.get("run_at")
            state = "" if planned.enabled else "  (disabled)"
            self.stdout.write(
                f"{verb}: {planned.name}  {schedule['type']} {when} "
                f"{schedule.get('timezone', '')} -> {planned.spec['handler']['task']} "
                f"on {planned.spec['handler']['queue']}{state}"
            )
        for skipped in report.skipped:
            self.stdout.write(
                self.style.WARNING(f"not converted: {skipped.name}: {skipped.reason}")
            )
        done = "to create (dry run)" if options["dry_run"] else "created"
        self.stdout.write(
            self.style.SUCCESS(f"{len(report.planned)} {done}, {len(report.skipped)} not converted")
        )
