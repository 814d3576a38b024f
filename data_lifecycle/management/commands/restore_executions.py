"""List archived runs, or read one archive back into the side table for investigation.

python manage.py restore_executions --list
python manage.py restore_executions FILE      # a path or s3:// URL from --list
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from data_lifecycle.services.archive_store import ArchiveStore
from data_lifecycle.services.restore import executions_restore


class Command(BaseCommand):
    help = "Restore an executions archive into the RestoredExecution side table (or --list)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", nargs="?", help="archive path or s3:// URL")
        parser.add_argument("--list", action="store_true", help="list the archives")
        parser.add_argument("--archive-url", help="directory or s3://bucket/prefix to list")

    def handle(self, *args, **options) -> None:
        if options["list"]:
            for manifest in ArchiveStore(options["archive_url"]).manifests():
                self.stdout.write(
                    f"{manifest['location']}  {manifest.get('kind')}  {manifest['rows']} rows  "
                    f"{manifest.get('from', '')} .. {manifest.get('to', '')}"
                )
            return
        if not options["file"]:
            raise CommandError("give an archive FILE, or --list")
        try:
            count = executions_restore(location=options["file"])
        except (OSError, ValueError) as error:
            raise CommandError(str(error)) from error
        self.stdout.write(
            self.style.SUCCESS(f"restored {count} executions into scheduler_app_restoredexecution")
        )
