"""Writes to the embedded chaos stack's database (tests/chaos/embedded.py), run as
`python -m tests.chaos.embedded_manage` with DATABASE_URL pointing at it: the test process's
own Django connection is on the test database."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    """`setup LEDGER TASKS HANDLER_SECONDS`: migrate (nothing to apply when tests/chaos/
    embedded.py copied the migrated schema in), make a tenant and the ledger tasks,
    print their ids (JSON). `pause ID...`: pause those tasks."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    django.setup()
    from django.core.management import call_command

    import tests.ledger  # noqa: F401 (the `ledger` handler, which the tasks name)
    from scheduler_app.models import TaskDefinition
    from scheduler_app.services.task_definitions import task_pause
    from scheduler_app.services.tenants import tenant_create
    from tests.chaos.harness import ledger_task_spec
    from tests.factories import make_task

    command, *args = argv
    if command == "setup":
        ledger, count, seconds = Path(args[0]), int(args[1]), float(args[2])
        call_command("migrate", interactive=False, verbosity=0)
        tenant = tenant_create(slug="chaos")
        created = [
            make_task(tenant, **ledger_task_spec(index, ledger, seconds)) for index in range(count)
        ]
        print(json.dumps([str(task.id) for task in created]))
    elif command == "pause":
        for task in TaskDefinition.platform.filter(id__in=args):
            task_pause(task=task)
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
