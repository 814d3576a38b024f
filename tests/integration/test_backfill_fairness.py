"""One tenant's many backfills against another's, on the real beat leader and worker.

Before: a housekeeping round advanced only the 200 oldest running backfills, whatever their
tenant: demo's 200 parked backfills (runs waiting for an event that never comes) held acme's
at 1/3 for over 61 s. Now demo may have at most BACKFILL_MAX_RUNNING_PER_TENANT running (one
more is refused), and rounds take tenants in turn: with a round of only 2 and demo's 5 parked
backfills all older, acme's backfill advances every round and completes."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from dags.models import Backfill
from dags.services.backfills import backfill_create
from dags.services.definitions import dag_create
from scheduler_app.errors import LimitReached
from tests.factories import make_task
from tests.integration.conftest import dump_logs
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HOURLY = {"type": "cron", "expression": "0 * * * *", "timezone": "UTC"}


def test_many_parked_backfills_of_one_tenant_do_not_hold_up_another_s(
    tenant_factory, live_worker, beats, settings
):
    settings.BACKFILL_MAX_RUNNING_PER_TENANT = 5
    demo, _ = tenant_factory("demo")
    acme, _ = tenant_factory("acme")
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    parked = dag_create(
        tenant=demo,
        raw={
            "dag": "parked",
            "schedule": HOURLY,
            "tasks": [{"id": "wait", "wait_for_event": {"name": "never", "timeout_seconds": 3600}}],
        },
    )
    for _ in range(5):
        backfill_create(tenant=demo, dag=parked, start=end - timedelta(hours=24), end=end)
    with pytest.raises(LimitReached):
        backfill_create(tenant=demo, dag=parked, start=end - timedelta(hours=24), end=end)

    task = make_task(acme, name="hourly-import", schedule=HOURLY)
    theirs = backfill_create(tenant=acme, task=task, start=end - timedelta(hours=3), end=end)
    started = time.monotonic()
    beat = beats("solo", BACKFILL_ADVANCE_BATCH="2")
    try:
        wait_until(
            lambda: Backfill.platform.get(id=theirs.id).status == "completed",
            timeout=60,
            interval=0.2,
            message="acme's backfill to complete beside demo's parked ones",
        )
    except AssertionError:
        print(dump_logs(live_worker, beat))
        raise
    seconds = time.monotonic() - started
    print(f"\nacme's 3-fire backfill completed in {seconds:.1f} s beside demo's 5 parked ones")
    assert Backfill.platform.filter(tenant=demo, status="running").count() == 5
    # Three fires, one at a time, each released by a round (1 s apart) after the last ended.
    assert seconds < 30, seconds
