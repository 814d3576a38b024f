"""`manage.py tenant_worker [--print] acme [celery worker options]`: start a Celery worker for one
tenant's own pool (WORKER_TENANT_POOLS; `scheduler_app/tenant_pools.py`): it consumes only
`tenant.acme.critical,normal,bulk` (and their capability queues), with the pool's slot cap
as its concurrency unless `--concurrency`/`-c` is given. `--print` shows the command."""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler_app.tenant_pools import tenant_pool_queues


def tenant_worker_argv(slug: str, *, slots: int, extra: list[str]) -> list[str]:
    """The worker's command line: the tenant's queues, the cap as concurrency (unless given),
    a node name saying whose pool it serves."""
    argv = [sys.executable, "-m", "celery", "-A", "project", "worker"]
    argv += ["-Q", ",".join(tenant_pool_queues(slug))]
    if not any(arg in ("-c", "--concurrency") or arg.startswith("--concurrency=") for arg in extra):
        argv += ["--concurrency", str(slots)]
    if not any(arg in ("-n", "--hostname") or arg.startswith("--hostname=") for arg in extra):
        argv += ["-n", f"tenant-{slug}@%h"]
    return argv + extra


class Command(BaseCommand):
    help = (
        "Start a Celery worker for one tenant's own worker pool (WORKER_TENANT_POOLS): "
        "tenant_worker [--print] SLUG [celery worker options, e.g. -l INFO]"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--print", action="store_true", help="print the command only")
        parser.add_argument(
            "worker_options", nargs=argparse.REMAINDER, help="passed to celery worker"
        )

    def handle(self, *args: object, **options: object) -> None:
        slug = str(options["slug"])
        slots = settings.WORKER_TENANT_POOLS.get(slug)
        if slots is None:
            named = ", ".join(settings.WORKER_TENANT_POOLS) or "none"
            raise CommandError(
                f"WORKER_TENANT_POOLS names no tenant {slug!r} (it names: {named}); its runs "
                "go to the shared pools, and a worker started for it would get none"
            )
        argv = tenant_worker_argv(slug, slots=slots, extra=list(options["worker_options"]))
        if options["print"]:
            self.stdout.write(shlex.join(argv))
            return
        # The worker replaces this process, so the supervisor's signals reach it; its argv is
        # this command's own (the interpreter, a fixed module and the operator's options).
        os.execv(argv[0], argv)  # noqa: S606
