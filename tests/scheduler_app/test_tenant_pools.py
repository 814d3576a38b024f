"""Tenant worker pools: the setting, the queues a tenant's worker consumes, the ring that
routes a dedicated tenant's doorbells to them (real PostgreSQL and Redis), and the claim's
cap on its running runs."""

from __future__ import annotations

import base64
import json
import uuid

import pytest
from django.utils import timezone

from project.celery import app
from scheduler_app.fleet.capabilities import capability_queues_to_consume
from scheduler_app.fleet.records import sticky_queue_name, worker_record_save
from scheduler_app.management.commands.tenant_worker import tenant_worker_argv
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.ring import ring
from scheduler_app.ringing.sticky import sticky_hint_set
from scheduler_app.ringing.tenant_pools import dedicated_tenants_forget
from scheduler_app.services.quotas import quota_decide_counts
from scheduler_app.tenant_pools import (
    TenantPoolsError,
    tenant_pool_queues,
    tenant_pool_tier,
    tenant_pools_parse,
)
from tests.factories import make_queued_runs, make_task, make_worker_record


def test_the_setting_is_slug_equals_slots():
    assert tenant_pools_parse("") == {}
    assert tenant_pools_parse(" acme=8, globex=4 ,") == {"acme": 8, "globex": 4}


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("acme", "is not <tenant slug>=<slots>"),
        ("Acme=3", "is not <tenant slug>=<slots>"),
        ("acme=0", "from 1 to"),
        ("acme=-2", "from 1 to"),
        ("acme=eight", "from 1 to"),
        ("acme=²", "from 1 to"),
        ("acme=1,acme=2", "twice"),
    ],
)
def test_a_bad_setting_is_refused_naming_the_entry(raw, says):
    with pytest.raises(TenantPoolsError, match=says):
        tenant_pools_parse(raw)


def test_a_tenant_worker_consumes_its_tiers_and_their_capability_queues_only():
    queues = tenant_pool_queues("acme")
    assert queues == ["tenant.acme.critical", "tenant.acme.normal", "tenant.acme.bulk"]
    assert [tenant_pool_tier(queue) for queue in queues] == ["critical", "normal", "bulk"]
    assert tenant_pool_tier("normal") is None and tenant_pool_tier("tenant.acme.x") is None
    assert capability_queues_to_consume(queues[1:2], ["container", "shell"]) == [
        "tenant.acme.normal.container"
    ]


def test_the_tenant_worker_command_gives_the_cap_as_concurrency_unless_told():
    argv = tenant_worker_argv("acme", slots=8, extra=["-l", "INFO"])
    assert argv[argv.index("-Q") + 1] == "tenant.acme.critical,tenant.acme.normal,tenant.acme.bulk"
    assert argv[argv.index("--concurrency") + 1] == "8" and argv[-2:] == ["-l", "INFO"]
    assert "--concurrency" not in tenant_worker_argv("acme", slots=8, extra=["-c", "2"])


def _rung(redis_client, queue: str) -> list[str]:
    prefix = app.conf.broker_transport_options.get("global_keyprefix") or ""
    ids = []
    for message in reversed(redis_client.lrange(prefix + queue, 0, -1)):
        args = json.loads(base64.b64decode(json.loads(message)["body"]))[0]
        ids.extend(args[0] if isinstance(args[0], list) else args)
    redis_client.delete(prefix + queue)
    return ids


@pytest.mark.django_db
def test_a_dedicated_tenants_doorbells_go_to_its_queues_and_never_stick_to_a_shared_worker(
    tenant_factory, redis_client, private_broker, settings
):
    dedicated, _ = tenant_factory("acme")
    shared, _ = tenant_factory("globex")
    settings.WORKER_TENANT_POOLS = {"acme": 2}
    dedicated_tenants_forget()  # a test before this one may have had another acme
    tier = f"ring-{uuid.uuid4().hex[:6]}"  # a tier of the test's own: no worker reads it
    now = timezone.now()
    acme_runs = make_queued_runs(make_task(dedicated), 2, queue=tier, due=now)
    globex_runs = make_queued_runs(make_task(shared), 1, queue=tier, due=now)
    shared_worker = f"shared-{uuid.uuid4().hex[:6]}@host"
    worker_record_save(make_worker_record(shared_worker, concurrency=4))
    # A hint naming a shared worker (as a run before the pool existed would have left).
    sticky_hint_set(execution_id=str(acme_runs[0].id), worker_id=shared_worker)
    bells = [Doorbell(str(run.id), str(run.tenant_id), tier) for run in [*acme_runs, *globex_runs]]

    assert ring(bells) == 3

    assert sorted(_rung(redis_client, f"tenant.acme.{tier}")) == sorted(
        str(run.id) for run in acme_runs
    )
    assert _rung(redis_client, tier) == [str(globex_runs[0].id)]
    assert _rung(redis_client, sticky_queue_name(shared_worker)) == []


@pytest.mark.django_db
def test_the_claim_defers_a_dedicated_tenants_run_past_its_slot_cap(tenant, settings):
    settings.WORKER_TENANT_POOLS = {tenant.slug: 2}
    now = timezone.now()
    assert quota_decide_counts(tenant=tenant, running=2, runs_after=1, seconds=0, now=now) is None
    deferral = quota_decide_counts(tenant=tenant, running=3, runs_after=1, seconds=0, now=now)
    assert deferral is not None and (deferral.quota, deferral.limit) == ("worker_pool_slots", 2)
    settings.WORKER_TENANT_POOLS = {}
    assert quota_decide_counts(tenant=tenant, running=3, runs_after=1, seconds=0, now=now) is None
