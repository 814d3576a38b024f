"""Settings for benchmarks: the project's, on a database and Redis db of their own, with
django-celery-beat installed so its DatabaseScheduler can run beside ours."""

import os

from bench.support import DATABASE_URL

os.environ["DATABASE_URL"] = DATABASE_URL
if "BENCH_REDIS_URL" not in os.environ:
    # Claim a Redis db number the way test runs do (they flush the dbs they claim), and
    # hand it to the beats and workers a scenario starts through the environment.
    import atexit
    import uuid

    from project.settings.test_redis import claim_redis_db, release_redis_db

    _base = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    _owner = f"bench-{uuid.uuid4().hex[:8]}"
    os.environ["BENCH_REDIS_URL"], _number = claim_redis_db(_base, owner=_owner)
    atexit.register(release_redis_db, _base, _number, owner=_owner)
    # The live log tails' db, apart from the broker's as in every deployment.
    os.environ["LIVE_LOGS_REDIS_URL"], _live = claim_redis_db(_base, owner=_owner)
    atexit.register(release_redis_db, _base, _live, owner=_owner)
os.environ["REDIS_URL"] = os.environ["BENCH_REDIS_URL"]
os.environ.pop("CELERY_BROKER_URL", None)
os.environ["SCHEDULER_REDIS_PREFIX"] = "bench:"
os.environ.setdefault("LOG_LEVEL", "WARNING")

# Importing project.settings.test_redis above imported project.settings, hence `base` and
# `redis_celery`, before the environment was set: read them again, or this process would keep
# the default REDIS_URL (db 0, shared) while the workers and beats it spawns use the
# benchmark's db.
import importlib

import project.settings.base
import project.settings.redis_celery

importlib.reload(project.settings.redis_celery)
importlib.reload(project.settings.base)

from project.settings.base import *  # noqa: E402, F403
from project.settings.base import INSTALLED_APPS  # noqa: E402

INSTALLED_APPS = [*INSTALLED_APPS, "django_celery_beat"]
DJANGO_CELERY_BEAT_TZ_AWARE = True
