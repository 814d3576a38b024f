"""Tenant worker pools with real processes: a dedicated tenant's runs run only on the worker
started for it, never more at once than its slot cap (the claim holds the cap even on a
worker with more processes), and the shared tenants' runs run only on the shared worker,
none of them waiting behind the dedicated tenant's backlog."""

from __future__ import annotations

import pytest

from scheduler_app.models import TaskExecution
from scheduler_app.ringing.tenant_pools import dedicated_tenants_forget
from scheduler_app.services.task_definitions import task_trigger
from scheduler_app.tenant_pools import tenant_pool_queues
from tests.factories import make_task
from tests.integration.conftest import FAST_WORKER, dump_logs
from tests.processes import start_worker, stop_all, wait_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("private_broker"),
]

CAP = 2
POOLS = {"WORKER_TENANT_POOLS": f"acme={CAP}", "QUOTA_DEFER_SECONDS": "0.4"}


def _most_at_once(runs: list[TaskExecution]) -> int:
    edges = sorted(
        [(run.started_at, 1) for run in runs] + [(run.completed_at, -1) for run in runs],
        key=lambda edge: (edge[0], edge[1]),  # an end before a start at the same instant
    )
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def test_a_dedicated_tenant_runs_on_its_own_worker_within_its_cap(tenant_factory, settings, beats):
    settings.WORKER_TENANT_POOLS = {"acme": CAP}
    dedicated_tenants_forget()
    acme, _ = tenant_factory("acme")
    shared_tenants = [tenant_factory(slug)[0] for slug in ("beta", "gamma")]
    env = {**FAST_WORKER, **POOLS}
    shared = start_worker(name="pool-shared", concurrency=2, env_overrides=env, wait=False)
    # One process more than the cap: the claim, not only the concurrency, keeps the cap.
    own = start_worker(
        name="pool-acme",
        queues=",".join(tenant_pool_queues("acme")),
        concurrency=CAP + 1,
        env_overrides=env,
        wait=False,
    )
    beat = beats("pools", **POOLS)  # promotes the runs the claim deferred past the cap
    try:
        for worker in (shared, own):
            worker.wait_for_log("ready.", timeout=60)
        sleepy = {
            "handler": {"type": "python", "callable": "sleep"},
            "schedule": {"type": "manual"},
        }
        backlog = make_task(acme, name="backlog", parameters={"seconds": 0.6}, **sleepy)
        acme_runs = [task_trigger(task=backlog) for _ in range(6)]
        shared_runs = [
            task_trigger(task=make_task(t, name="small", parameters={"seconds": 0.1}, **sleepy))
            for t in shared_tenants
            for _ in range(1)
        ]
        assert {run.queue for run in acme_runs} == {"normal"}  # the row keeps its tier
        ids = [run.id for run in acme_runs + shared_runs]
        try:
            wait_until(
                lambda: (
                    TaskExecution.platform.filter(id__in=ids, status="success").count() == len(ids)
                ),
                timeout=90,
                message="every run to succeed",
            )
        except AssertionError:
            print(dump_logs(beat, shared, own))
            raise
        done = {run.id: run for run in TaskExecution.platform.filter(id__in=ids)}
        assert all("pool-acme" in done[run.id].worker_id for run in acme_runs)
        assert all("pool-shared" in done[run.id].worker_id for run in shared_runs)
        assert _most_at_once([done[run.id] for run in acme_runs]) <= CAP
        # The shared tenants did not wait for the dedicated tenant's backlog of 6 x 0.6 s.
        for run in shared_runs:
            assert (done[run.id].started_at - done[run.id].scheduled_at).total_seconds() < 2.0
    finally:
        stop_all([shared, own])
        dedicated_tenants_forget()
