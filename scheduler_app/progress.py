"""A run's progress: `{percent, message, updated_at}`.

While a run goes, the worker keeps the latest value in Redis (one key per execution, written
by the run watcher at most every flush period, see `workers.progress`); when the run ends the
latest value is stored with the execution (`TaskExecution.progress`). Readers take the stored
value when there is one, else the live one, so a finished run never depends on Redis.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from scheduler_app.redis_client import get_redis, redis_key

logger = logging.getLogger(__name__)

# The live value outlives the run a little (the stored one is the record).
LIVE_TTL_SECONDS = 3600


def progress_key(execution_id: str) -> str:
    return redis_key(f"progress:{execution_id}")


def progress_live_get_many(execution_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """{execution id: its live progress} for the runs that reported one (one MGET)."""
    ids = [str(execution_id) for execution_id in execution_ids]
    if not ids:
        return {}
    try:
        raw = get_redis().mget([progress_key(execution_id) for execution_id in ids])
    except Exception:  # Redis away: a live bar is missing, nothing else
        logger.exception("could not read live progress")
        return {}
    return {
        execution_id: json.loads(value)
        for execution_id, value in zip(ids, raw, strict=True)
        if value
    }
