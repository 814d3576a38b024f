"""Settings for benchmarks: the project's, on a database and Redis db of their own, with
django-celery-beat installed so its DatabaseScheduler can run beside ours."""

import os

os.environ["DATABASE_URL"] = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/sched_bench"
)
os.environ["REDIS_URL"] = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
os.environ.pop("CELERY_BROKER_URL", None)
os.environ["SCHEDULER_REDIS_PREFIX"] = "bench:"
os.environ.setdefault("LOG_LEVEL", "WARNING")

from project.settings.base import *  # noqa: F403
from project.settings.base import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "django_celery_beat"]
DJANGO_CELERY_BEAT_TZ_AWARE = True
