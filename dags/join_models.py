"""A DAG node that joined another run's execution (`DagNodeJoin`): a singleton node whose key
had an active run, or a debounced node whose key had a pending one (`dags.engine.flow_starts`).

Kept out of `dags/models.py` (one concern a module, and that module under 500 lines); that
module imports this one so Django finds it in the `dags` app. The run is referenced by the
app label ("dags.DagRun"), so this module does not import `dags.models` back. Owned through its
run (no tenant column of its own): reached through the scoped run, with a plain manager, as
the node states are.
"""

from __future__ import annotations

from django.db import models
from django.utils.timezone import now as utc_now


class DagNodeJoin(models.Model):
    """Node `node_id` of `run` takes the outcome of the execution chain `execution_root_id`,
    which another node (of this run or another) started: the chain's link
    (`DagNodeExecution`) names that node; this row names every node that joined it. Written
    once, in the transaction that dispatched the joining node; read when the chain ends
    (`dags.engine.flow_joins`) and when the chain's own run is stopped (its chain is kept
    running for them)."""

    id = models.BigAutoField(primary_key=True)
    execution_root_id = models.UUIDField()
    run = models.ForeignKey("dags.DagRun", on_delete=models.CASCADE, related_name="+")
    node_id = models.CharField(max_length=255)
    kind = models.CharField(max_length=12)  # singleton | debounce
    key = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(default=utc_now)

    class Meta:
        verbose_name = "DAG node join"
        verbose_name_plural = "DAG node joins"
        indexes = [models.Index(fields=["execution_root_id"], name="idx_dagnodejoin_root")]
        constraints = [
            models.UniqueConstraint(
                fields=["execution_root_id", "run", "node_id"], name="uniq_dagnodejoin"
            )
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.node_id} joined {self.execution_root_id}"
