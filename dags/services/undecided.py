"""Ready nodes nobody decided: the beat leader's housekeeping decides them.

A ready node with a condition is decided after the transaction that made it ready commits
(`readiness.conditions_decide`, in the process that committed it). If that process dies in
between (a worker killed right after a finish), the node would wait forever: `waiting`, no
upstream left, its run running. This finds such nodes once they have been left alone for
`grace_seconds` and decides them the same way. A node decided twice is harmless: the verdicts
are applied under the run's lock to nodes still waiting only.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import timedelta

from django.utils import timezone

from dags.choices import NodeStatus, RunStatus
from dags.engine.readiness import conditions_decide
from dags.models import DagNodeState

logger = logging.getLogger(__name__)


def undecided_nodes_decide(*, grace_seconds: float = 10.0, limit: int = 200) -> int:
    """Decide up to `limit` nodes left undecided for `grace_seconds`. Returns how many."""
    cutoff = timezone.now() - timedelta(seconds=grace_seconds)
    stuck = DagNodeState.objects.filter(
        status=NodeStatus.WAITING,
        remaining_upstream=0,
        run__status=RunStatus.RUNNING,
        updated_at__lt=cutoff,
    ).values_list("run_id", "node_id")[:limit]
    by_run: dict = defaultdict(list)
    for run_id, node_id in stuck:
        by_run[run_id].append(node_id)
    for run_id, node_ids in by_run.items():
        logger.warning("deciding %d DAG node(s) of run %s left undecided", len(node_ids), run_id)
        conditions_decide(run_id=run_id, node_ids=node_ids)
    return sum(len(node_ids) for node_ids in by_run.values())
