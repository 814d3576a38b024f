"""Archive (export, verify, delete) execution history scheduled before a date, on demand.

python manage.py archive_executions --before 2026-09-01 [--tenant SLUG] [--logs]
python manage.py archive_executions --retention      # apply every tenant's period now
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.core.management.base import BaseCommand, CommandError

from data_lifecycle.services.archive_store import ArchiveStore
from data_lifecycle.services.retention import executions_archive, logs_archive, retention_apply
from scheduler_app.models import Tenant


class Command(BaseCommand):
    help = "Archive execution history (and optionally logs) older than --before, then delete it."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--before", help="YYYY-MM-DD or ISO datetime (UTC if no offset)")
        parser.add_argument("--tenant", help="only this tenant's rows (slug)")
        parser.add_argument("--logs", action="store_true", help="archive execution logs too")
        parser.add_argument(
            "--retention", action="store_true", help="apply every tenant's retention period"
        )
        parser.add_argument("--archive-url", help="directory or s3://bucket/prefix")

    def handle(self, *args, **options) -> None:
        store = ArchiveStore(options["archive_url"])
        if options["retention"]:
            report = retention_apply(store=store)
        else:
            if not options["before"]:
                raise CommandError("give --before DATE (or --retention)")
            before = _parse_before(options["before"])
            tenant_ids = None
            if options["tenant"]:
                tenant = Tenant.objects.filter(slug=options["tenant"]).first()
                if tenant is None:
                    raise CommandError(f"no tenant {options['tenant']!r}")
                tenant_ids = [tenant.id]
            report = executions_archive(before=before, tenant_ids=tenant_ids, store=store)
            if options["logs"]:
                report.merge(logs_archive(before=before, tenant_ids=tenant_ids, store=store))
        for archived in report.files:
            self.stdout.write(f"{archived.location}  {archived.rows} rows")
        for name in report.partitions_dropped:
            self.stdout.write(f"dropped partition {name}")
        rate = report.rows / report.seconds if report.seconds else 0.0
        self.stdout.write(
            self.style.SUCCESS(
                f"archived {report.rows} rows in {len(report.files)} files "
                f"({report.seconds:.1f}s, {rate:,.0f} rows/s)"
            )
        )


def _parse_before(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as error:
        raise CommandError(f"--before {text!r} is not a date (YYYY-MM-DD)") from error
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
