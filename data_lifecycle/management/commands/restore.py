"""Restore a backup made by `manage.py backup` into a fresh database (docs/operations/backups.md).

python manage.py restore FILE --target-url postgres://postgres@new-host:5432/scheduler
python manage.py restore FILE --target-database scheduler_restored   # same server as DATABASE_URL

Then point DATABASE_URL at the restored database, run `manage.py migrate` (a backup made by an
older release), and start the beat and the workers.
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from data_lifecycle.services.database_backup import (
    BackupError,
    Database,
    database_restore,
    default_database,
)


class Command(BaseCommand):
    help = "Restore a backup FILE into a fresh database (created; refused when it has tables)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", help="a file written by `manage.py backup`")
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument(
            "--target-url", help="postgres://user:password@host:port/dbname of the new database"
        )
        where.add_argument(
            "--target-database",
            help="a new database's name on the server DATABASE_URL names",
        )

    def handle(self, *args, **options) -> None:
        try:
            if options["target_url"]:
                target = Database.from_url(options["target_url"])
            else:
                target = default_database().named(options["target_database"])
            report = database_restore(path=Path(options["file"]), target=target)
        except BackupError as error:
            raise CommandError(str(error), returncode=error.exit_code) from None
        self.stdout.write(
            self.style.SUCCESS(
                f"restored {options['file']} into {report.database} ({report.seconds} s)"
            )
        )
