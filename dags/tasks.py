"""Thin Celery tasks of the DAG engine: a chord's shard and its join."""

from __future__ import annotations

from celery import shared_task

from dags.services.continuation import continuing
from dags.services.mapping import map_join_by_id
from dags.services.node_dispatch import MAP_JOIN_TASK, MAP_SHARD_TASK, MAP_SHARDS_TASK
from workers.runner import execution_batch_run, execution_run


@shared_task(name=MAP_SHARD_TASK, bind=True, acks_late=True, ignore_result=False)
def run_map_shard(self, execution_id: str) -> str:
    """A chord header member: runs the shard like any execution (the claim dedupes)."""

    return execution_run(execution_id=execution_id, worker_id=self.request.hostname or "worker")


@shared_task(name=MAP_SHARDS_TASK, bind=True, acks_late=True, ignore_result=False)
def run_map_shards(self, execution_ids: list[str]) -> str:
    """A chord header member with several shards: run as a batch (one claim for all)."""

    return execution_batch_run(
        execution_ids=execution_ids, worker_id=self.request.hostname or "worker"
    )


@shared_task(name=MAP_JOIN_TASK, bind=True, acks_late=True, ignore_result=True)
def join_map(self, run_id: str, node_id: str) -> bool:
    worker_id = self.request.hostname or "worker"
    # The joined node's successor may be run right here (see dags.services.continuation).
    with continuing(tier=(self.request.delivery_info or {}).get("routing_key")) as next_execution:
        joined = map_join_by_id(run_id=run_id, node_id=node_id)
        while (follow := next_execution()) is not None:
            execution_run(execution_id=follow, worker_id=worker_id)
    return joined
