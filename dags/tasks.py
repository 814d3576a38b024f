"""Thin Celery tasks of the DAG engine: a chord's shard and its join."""

from __future__ import annotations

from celery import shared_task

from dags.services.mapping import MAP_JOIN_TASK, MAP_SHARD_TASK


@shared_task(name=MAP_SHARD_TASK, bind=True, acks_late=True, ignore_result=False)
def run_map_shard(self, execution_id: str) -> str:
    """A chord header member: runs the shard like any execution (the claim dedupes)."""
    from workers.runner import execution_run

    return execution_run(execution_id=execution_id, worker_id=self.request.hostname or "worker")


@shared_task(name=MAP_JOIN_TASK, acks_late=True, ignore_result=True)
def join_map(run_id: str, node_id: str) -> bool:
    from dags.services.mapping import map_join_by_id

    return map_join_by_id(run_id=run_id, node_id=node_id)
