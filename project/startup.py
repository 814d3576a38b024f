"""Django's system checks at the start of every production process, not only `manage.py`.

`manage.py` runs the checks and stops on an error; gunicorn/uvicorn and Celery never did
(Celery's Django fixup runs them and drops the result), so a web process or a worker started
with, say, a broker visibility timeout shorter than a task (scheduler.E003) or pickle accepted
(scheduler.E006). The keys are refused even earlier, by the settings module itself
(project/settings/keys.py).
"""

from __future__ import annotations

import sys

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured


class StartupRefused(ImproperlyConfigured):
    pass


def check_errors() -> list[str]:
    return [
        str(message)
        for message in checks.run_checks()
        if message.is_serious() and not message.is_silenced()
    ]


def refuse_to_start_on_check_errors(process: str) -> None:
    """Raise StartupRefused naming every failing check, with the production settings (local
    and test runs start regardless, as before). An exception, not an exit: gunicorn halts
    when a worker fails to boot with one, but respawns a worker that exits."""

    if not getattr(settings, "SCHEDULER_PRODUCTION", False):
        return
    errors = check_errors()
    if errors:
        raise StartupRefused(
            f"{process}: refusing to start, system check errors:\n" + "\n".join(errors)
        )


def exit_on_check_errors(process: str) -> None:
    """For Celery: it logs and swallows exceptions raised by signal receivers, so print the
    refusal and leave with status 1 instead."""
    try:
        refuse_to_start_on_check_errors(process)
    except StartupRefused as refused:
        print(str(refused), file=sys.stderr, flush=True)
        raise SystemExit(1) from refused
