"""Back up the scheduler's database: a consistent pg_dump (docs/operations/backups.md).

python manage.py backup /backups/scheduler-$(date -u +%Y%m%dT%H%M%SZ).dump
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from data_lifecycle.services.database_backup import BackupError, database_backup


class Command(BaseCommand):
    help = "Dump the scheduler's database (one snapshot, pg_dump's custom format) to FILE."

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", help="where to write the backup (replaced when it exists)")

    def handle(self, *args, **options) -> None:
        try:
            report = database_backup(path=Path(options["file"]))
        except BackupError as error:
            raise CommandError(str(error), returncode=error.exit_code) from None
        self.stdout.write(
            self.style.SUCCESS(
                f"backed up {report.database} to {report.path} "
                f"({report.size_bytes} bytes, {report.seconds} s)"
            )
        )
