"""How long a claimed run that may not start yet waits before it is looked at again: over
its tenant's concurrency quota (scheduler_app/services/quotas.py) or waiting for a
flow-control slot (scheduler_app/services/flow_admission.py)."""

from __future__ import annotations

from project.settings.env import env_float

# A run over its tenant's concurrency quota (or its worker pool's cap) is deferred this long;
QUOTA_DEFER_SECONDS = env_float("QUOTA_DEFER_SECONDS", 5.0)
# ... this long when those over it were claimed moments ago (services/quotas.py).
QUOTA_RECHECK_SECONDS = env_float("QUOTA_RECHECK_SECONDS", 0.5)
# A run waiting for a flow-control slot (concurrency key, pool) is looked at again after this
# long, then after a quarter of how long it has waited, at most FLOW_RECHECK_MAX_SECONDS,
# spread by +-25%, unless a finish hands it a slot first (scheduler_app/services/flow_admission.py).
FLOW_RECHECK_SECONDS = env_float("FLOW_RECHECK_SECONDS", 1.0)
FLOW_RECHECK_MAX_SECONDS = env_float("FLOW_RECHECK_MAX_SECONDS", 5.0)
