"""The worker list (dashboard Workers page, /metrics workers by state) read from the fleet
registry in real Redis, and the retry budget's gauge on /metrics."""

from __future__ import annotations

import re
import time
import uuid

import pytest
from django.test import Client
from django.utils import timezone

from scheduler_app.fleet import registry
from scheduler_app.monitoring.workers import worker_list
from scheduler_app.redis_client import get_redis, redis_key
from scheduler_app.services.retry_budget import (
    retry_budget_admit,
    retry_budget_note_execution,
    retry_budget_usage,
)
from tests.monitoring.test_metrics import scrape, scrape_auth  # noqa: F401 (fixture)
from workers.fleet_membership import Fleet

pytestmark = pytest.mark.django_db


@pytest.fixture
def signed_in(tenant_and_user) -> Client:
    client = Client()
    assert client.login(username=tenant_and_user[1].username, password="pw-123456")
    return client


@pytest.fixture
def fleet(settings):
    """Four workers as their heartbeats leave them: one live (this process, through the
    worker's own heartbeat code), one draining, one whose heartbeats stopped, one dead."""
    # Heartbeats every 10 s: the live and the draining worker stay alive for 20 s after the
    # fixture (two missed heartbeats), however slowly a loaded machine reaches the assertions.
    settings.FLEET = {**settings.FLEET, "HEARTBEAT_SECONDS": 10.0}
    now = time.time()
    run = uuid.uuid4().hex[:8]  # the hourly counters of a hostname outlive this test
    live = Fleet(hostname=f"obs-live@{run}", queues=["critical", "normal"], concurrency=4)
    registry.counters_reset(live.record.hostname)
    for _ in range(3):
        registry.run_started(live.record.hostname)
    registry.run_ended(live.record.hostname, errored=False)
    registry.run_ended(live.record.hostname, errored=False)
    registry.run_ended(live.record.hostname, errored=True)
    registry.run_started(live.record.hostname)
    live.beat()  # what the heartbeat thread does every HEARTBEAT_SECONDS

    def record(hostname: str, *, state: str, silent: float) -> registry.WorkerRecord:
        saved = registry.WorkerRecord(
            hostname=hostname,
            queues=["bulk"],
            concurrency=2,
            version="test",
            pid=1,
            started_at=now - 600,
            heartbeat_seconds=10.0,
            last_heartbeat=now - silent,
            state=state,
            cpu_percent=12.5,
            memory_rss_bytes=300 * 2**20,
            memory_percent=3.5,
            active_runs=1,
        )
        registry.worker_record_save(saved)
        return saved

    record(f"obs-draining@{run}", state=registry.STATE_DRAINING, silent=0.5)
    record(f"obs-silent@{run}", state=registry.STATE_ACTIVE, silent=120)
    record(f"obs-dead@{run}", state=registry.STATE_DEAD, silent=900)
    names = [f"obs-{kind}@{run}" for kind in ("live", "draining", "silent", "dead")]
    yield names
    client = get_redis()
    client.srem(redis_key("fleet:workers"), *names)
    client.delete(*(redis_key(f"fleet:worker:{name}") for name in names))
    registry.counters_reset(live.record.hostname)


def test_worker_list_reads_the_registry(fleet):
    workers = {w.name.split("@")[0]: w for w in worker_list() if w.name in fleet}
    live = workers["obs-live"]
    assert live.state == "active" and live.alive
    assert live.heartbeat_age_seconds < 60
    assert live.memory_rss_bytes > 0 and live.memory_percent > 0  # this test process
    assert live.active_runs == 1 and live.concurrency == 4
    assert (live.completed_last_hour, live.errors_last_hour) == (3, 1)
    assert live.error_rate == pytest.approx(1 / 3)
    assert workers["obs-draining"].state == "draining"
    silent = workers["obs-silent"]
    assert silent.state == "unresponsive" and not silent.alive  # 120 s > 3 missed beats
    assert silent.heartbeat_age_seconds >= 120
    assert workers["obs-dead"].state == "dead"
    assert workers["obs-dead"].error_rate is None


def test_workers_page_shows_the_registry(signed_in, tenant_and_user, fleet):
    # The fleet is platform staff's (tests/dashboard/test_workers_page.py: members see less).
    tenant_and_user[1].is_staff = True
    tenant_and_user[1].save(update_fields=["is_staff"])
    page = signed_in.get("/dashboard/workers?fragment=1").content.decode()
    row = page[page.index(f'data-worker="{fleet[0]}"') :].split("</tr>")[0]
    assert '<td class="w-active">1/4</td>' in row
    assert "33%" in row and "(1)" in row  # error rate: 1 of 3 finished in the last hour
    # memory: this test process's own RSS, which a long xdist run can take past a gigabyte
    assert re.search(r'class="w-memory">[0-9.]+\s?(MB|GB)', row.replace("\xa0", " "))
    # What it can run: every worker runs these; `container` needs a runtime (none here), and
    # `egress` is the test workers' WORKER_SHELL_EGRESS.
    assert '<td class="w-capabilities">shell, http, python, celery, egress</td>' in row
    silent = page[page.index(f'data-worker="{fleet[2]}"') :].split("</tr>")[0]
    assert "unresponsive" in silent and "12.5%" in silent and "300.0\xa0MB" in silent
    overview = signed_in.get("/dashboard/?fragment=1").content.decode()
    alive = overview[overview.index('id="workers-alive"') :].split("</p>")[0]
    # The live and the draining worker (plus any other worker of this test run).
    assert int(alive.split(">")[1]) >= 2


def test_metrics_count_workers_by_state(scrape_auth, fleet):  # noqa: F811
    mine = {w.state for w in worker_list() if w.name in fleet}
    assert mine == {"active", "draining", "unresponsive", "dead"}
    workers = scrape()["scheduler_workers"]
    for state in mine:
        assert workers[(("state", state),)] >= 1
    assert workers[(("state", "gone"),)] >= 0


def test_metrics_export_the_retry_budget(scrape_auth, settings):  # noqa: F811
    settings.FLEET = {
        **settings.FLEET,
        "RETRY_BUDGET_RATIO": 0.2,
        "RETRY_BUDGET_MIN_PER_MINUTE": 1,
    }
    # The writes and the scrape must fall in one minute (the counters are per minute): done
    # again, in the next minute, when a minute began while they ran.
    for _ in range(3):
        started = timezone.now()
        before = retry_budget_usage(now=started)
        for _ in range(20):
            retry_budget_note_execution(at=timezone.now())
        now = timezone.now()
        for _ in range(2):
            retry_budget_admit(due_at=now, now=now)
        budget = scrape()["scheduler_retry_budget"]
        after = retry_budget_usage(now=timezone.now())
        if timezone.now().replace(second=0, microsecond=0) == started.replace(
            second=0, microsecond=0
        ):
            break
    else:
        raise AssertionError("a new minute began during each of three tries")
    assert after["executions_this_minute"] - before["executions_this_minute"] == 20
    assert budget[(("kind", "started"),)] == after["executions_this_minute"]
    assert budget[(("kind", "retries"),)] == after["retries_this_minute"]
    assert budget[(("kind", "allowance"),)] == after["retry_allowance_this_minute"] >= 4
