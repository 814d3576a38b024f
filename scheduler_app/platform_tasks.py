"""The Celery task names a tenant's `celery` handler may never send: the platform's own.

Derived from the installed apps rather than kept as a list: every app's tasks live in its
package and are named after it (`alerting.deliver`, `dags.run_map_shard`, `workers.run_execution`;
data_lifecycle's keep their historical `scheduler_app.` names), so a new app is covered the
day it is installed. Celery's own (`celery.`), the project's and the benches' are added.
tests/workers/test_platform_tasks.py checks that every task the Celery app registers is covered.
"""

from __future__ import annotations

from functools import lru_cache

from django.apps import apps

from handler_contract.validation import PLATFORM_TASK_PREFIXES

ALWAYS = ("project", "celery", "kombu", "bench")


@lru_cache(maxsize=1)
def platform_task_prefixes() -> tuple[str, ...]:
    roots = {config.name.split(".", 1)[0] for config in apps.get_app_configs()}
    prefixes = {f"{root}." for root in roots.union(ALWAYS)}
    return tuple(sorted(prefixes.union(PLATFORM_TASK_PREFIXES)))
