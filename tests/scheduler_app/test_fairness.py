"""Fair dispatch's cap follows the drain rate the workers report (real Redis)."""

from __future__ import annotations

import time
import uuid

import pytest

from scheduler_app.redis_client import get_redis
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.fairness import (
    _drained_key,
    _drained_keys,
    fair_admit,
    fair_promote_allowance,
    fair_release_into,
)
from scheduler_app.ringing.ring import fleet_round

pytestmark = pytest.mark.django_db


@pytest.fixture
def tier():
    return f"fair-{uuid.uuid4().hex[:8]}"


def _bells(tenant: str, tier: str, count: int) -> list[Doorbell]:
    return [Doorbell(str(uuid.uuid4()), tenant, tier) for _ in range(count)]


def _drained(tier: str, per_second: int) -> None:
    get_redis().set(_drained_key(tier, int(time.time())), per_second, ex=10)


def test_a_cold_fleet_gets_the_floor(settings, tier):
    settings.FAIR_INFLIGHT_PER_TENANT = 5
    bells = _bells("a", tier, 20)
    admission = fair_admit(bells)
    assert len(admission.admitted) == 5
    # The excess comes back to the caller (which puts its rows back to pending), in order.
    assert admission.held_back == bells[5:]


def test_a_cold_fleet_rung_in_batches_takes_one_round_of_the_fleet(settings, tier):
    """The beat rings a burst in batches and knows the fleet: on a tier that has drained
    nothing lately, 8 live processes taking up to 128 runs a message take 1,024 runs at once;
    a cold cap of 5 would hold a burst on an idle fleet back and let it climb tick by tick."""
    settings.FAIR_INFLIGHT_PER_TENANT = 5
    assert fleet_round(128, 8) == 1024
    assert fleet_round(1, 8) == 0 and fleet_round(128, None) == 0  # one by one, or unknown
    admission = fair_admit(_bells("a", tier, 2000), fleet_round=fleet_round(128, 8))
    assert len(admission.admitted) == 1024 and len(admission.held_back) == 976
    assert fair_promote_allowance([tier], fleet_round=1024) == 1024
    # Another tenant has a round of its own.
    assert len(fair_admit(_bells("b", tier, 10), fleet_round=1024).admitted) == 10
    # Once the tier drains, the operator's floor holds again (the cap follows the rate): a
    # flood of slow runs on a busy fleet keeps no more than that queued ahead of a newcomer.
    _drained(tier, 20)
    admitted = fair_admit(_bells("c", tier, 100), fleet_round=1024).admitted
    assert len(admitted) == 7  # 20 a second shared by three busy tenants (a, b, c)
    assert fair_promote_allowance([tier], fleet_round=1024) == 20
    settings.FAIR_INFLIGHT_PER_TENANT = 0
    assert fair_promote_allowance([tier], fleet_round=1024) == 0


def test_a_fleet_that_drains_fast_takes_a_whole_burst_of_one_tenant(settings, tier):
    settings.FAIR_INFLIGHT_PER_TENANT = 5
    settings.FAIR_QUEUE_SECONDS = 1.0
    _drained(tier, 800)
    assert len(fair_admit(_bells("a", tier, 700)).admitted) == 700
    # ... but not more than about FAIR_QUEUE_SECONDS of the fleet's work at a time.
    assert len(fair_admit(_bells("a", tier, 300)).admitted) == 100


def test_busy_tenants_share_the_queue(settings, tier):
    settings.FAIR_INFLIGHT_PER_TENANT = 5
    settings.FAIR_QUEUE_SECONDS = 1.0
    _drained(tier, 40)
    assert len(fair_admit(_bells("a", tier, 100)).admitted) == 40  # alone: the whole rate
    assert len(fair_admit(_bells("b", tier, 100)).admitted) == 20  # two busy tenants: half each


def test_a_released_slot_is_free_again_and_counts_as_drained(settings, tier):
    settings.FAIR_INFLIGHT_PER_TENANT = 2
    first = fair_admit(_bells("a", tier, 3)).admitted
    assert len(first) == 2
    pipe = get_redis().pipeline(transaction=False)
    for bell in first:
        fair_release_into(pipe, execution_id=bell.execution_id, tenant_id="a", queue=tier)
    pipe.execute()
    drained = get_redis().mget(_drained_keys(tier, time.time()))
    assert sum(int(value or 0) for value in drained) == 2
    assert len(fair_admit(_bells("a", tier, 3)).admitted) >= 2


def test_promote_offers_about_what_one_tenant_may_send(settings, tier):
    settings.FAIR_INFLIGHT_PER_TENANT = 10
    settings.FAIR_QUEUE_SECONDS = 0.5
    assert fair_promote_allowance([tier]) == 10
    _drained(tier, 600)
    assert fair_promote_allowance([tier]) == 300
