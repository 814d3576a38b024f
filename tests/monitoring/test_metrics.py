"""/metrics and /readyz against real PostgreSQL and Redis (counters, broker lists, node status)."""

from __future__ import annotations

import base64
import json
import time
import uuid

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from project.celery import app
from runs.finish import run_finish
from scheduler_app.models import TaskExecution
from scheduler_app.monitoring.metrics import METRIC_NAMES
from scheduler_app.monitoring.system import queue_states
from scheduler_app.redis_client import redis_key
from scheduler_app.ringing.publish import RUN_EXECUTION_TASK
from scheduler_app.services.claims import execution_claim
from scheduler_app.services.executions import Outcome
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task

pytestmark = pytest.mark.django_db

TOKEN = "scrape-token-123"


@pytest.fixture
def scrape_auth(settings):
    settings.MONITORING = {
        **settings.MONITORING,
        "METRICS_BEARER_TOKEN": TOKEN,
        "METRICS_BASIC_AUTH": "prom:secret-pw",
    }


def scrape(**headers) -> dict[str, dict[tuple, float]]:
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}", **headers)
    assert response.status_code == 200, response.content
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[labels] = sample.value
    return samples


def test_metrics_refuse_without_credentials(scrape_auth):
    assert Client().get("/metrics").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    basic = base64.b64encode(b"prom:secret-pw").decode()
    assert Client().get("/metrics", HTTP_AUTHORIZATION=f"Basic {basic}").status_code == 200
    wrong = base64.b64encode(b"prom:nope").decode()
    assert Client().get("/metrics", HTTP_AUTHORIZATION=f"Basic {wrong}").status_code == 401


def test_metrics_without_configured_auth_stay_closed(settings):
    settings.MONITORING = {
        **settings.MONITORING,
        "METRICS_BEARER_TOKEN": "",
        "METRICS_BASIC_AUTH": "",
    }
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401


def exposed_families(text: str) -> set[str]:
    return {line.split()[2] for line in text.splitlines() if line.startswith("# HELP ")}


def test_every_declared_metric_is_exposed(scrape_auth, tenant):
    text = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
    assert exposed_families(text) == set(METRIC_NAMES)


def test_runs_counted_by_a_finish_are_seen_by_a_scrape(
    scrape_auth, tenant, django_capture_on_commit_callbacks
):
    """The worker process counts in Redis; the web process's scrape reads it."""
    task = make_task(tenant, name="counted", priority=2)
    before = scrape()
    for status in ("success", "success", "failed"):
        with django_capture_on_commit_callbacks(execute=True):
            execution = task_trigger(task=task)
        claim = execution_claim(execution_id=execution.id, worker_id="w1", lease_seconds=30)
        with django_capture_on_commit_callbacks(execute=True):
            run_finish(
                execution_id=execution.id,
                claim_token=claim.claim_token,
                outcome=Outcome(status=status, transient=False, error_class="x"),
            )
    after = scrape()

    def delta(name, **labels):
        key = tuple(sorted(labels.items()))
        return after.get(name, {}).get(key, 0) - before.get(name, {}).get(key, 0)

    runs = {"tenant": "acme", "tier": "critical"}
    assert delta("scheduler_runs_total", status="success", **runs) == 2
    assert delta("scheduler_runs_total", status="failed", **runs) == 1
    assert delta("scheduler_schedule_lag_seconds_count", tier="critical") == 3
    assert delta("scheduler_run_duration_seconds_count", tier="critical") == 3
    assert delta("scheduler_schedule_lag_seconds_bucket", tier="critical", le="+Inf") == 3
    assert after["scheduler_dead_letters"][(("tenant", "acme"),)] >= 1


def test_queue_depth_and_oldest_age_come_from_the_broker_lists(settings, tenant):
    """Real Celery messages in real Redis lists, under a key prefix no test worker consumes."""
    prefix = f"qd-{uuid.uuid4().hex[:8]}:"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {
        **settings.CELERY_BROKER_TRANSPORT_OPTIONS,
        "global_keyprefix": prefix,
    }
    task = make_task(tenant, name="queued", priority=9)
    executions = [task_trigger(task=task) for _ in range(3)]
    TaskExecution.platform.filter(id=executions[0].id).update(
        queued_at=executions[0].queued_at.replace(year=2020)
    )
    with app.connection_for_write(transport_options={"global_keyprefix": prefix}) as conn:
        producer = app.amqp.Producer(conn)
        for execution in executions:
            app.send_task(
                RUN_EXECUTION_TASK,
                args=[str(execution.id)],
                queue="bulk",
                routing_key="bulk",
                producer=producer,
            )
    states = {s.tier: s for s in queue_states()}
    assert states["bulk"].depth == 3
    assert states["normal"].depth == 0
    assert states["bulk"].oldest_age_seconds > 365 * 24 * 3600  # the first one published


def test_runs_waiting_count_runs_per_tier_not_broker_messages(scrape_auth, tenant):
    """What KEDA scales the worker tiers on: the database's queued runs and due pending runs
    of each tier, whether or not a doorbell for them is in the broker (here none is: the
    test's transaction never commits, so no doorbell rings: scheduler_queue_depth would
    say nothing waits)."""
    from datetime import timedelta

    from django.utils import timezone

    before = scrape()["scheduler_runs_waiting"]
    task = make_task(tenant, name="backlog", priority=9)
    runs = [task_trigger(task=task) for _ in range(4)]
    now = timezone.now()
    # One pending and due (counted), one pending in an hour (not yet), one running (taken).
    TaskExecution.platform.filter(id=runs[1].id).update(
        status="pending", scheduled_at=now - timedelta(seconds=5)
    )
    TaskExecution.platform.filter(id=runs[2].id).update(
        status="pending", scheduled_at=now + timedelta(hours=1)
    )
    assert execution_claim(execution_id=runs[3].id, worker_id="w1", lease_seconds=30)
    after = scrape()
    waiting = after["scheduler_runs_waiting"]
    assert set(waiting) == {(("tier", tier),) for tier in ("critical", "normal", "bulk")}
    bulk = (("tier", "bulk"),)
    assert waiting[bulk] - before.get(bulk, 0) == 2
    for tier in ("critical", "normal"):
        assert waiting[(("tier", tier),)] == before.get((("tier", tier),), 0)


def test_leader_status_and_readyz(settings, redis_client, scrape_auth):
    # A beat an earlier integration test of this process started may still have its status
    # in Redis (it expires after 30 s): start from no scheduler at all.
    for key in redis_client.scan_iter(match=redis_key("scheduler:node:*")):
        redis_client.delete(key)
    # No beat leads: the web process is still ready (its database and Redis answer) ...
    response = Client().get("/readyz", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.json()
    assert response.json()["checks"] == {"database": "ok", "redis": "ok"}
    # ... and the scheduler's own endpoint says what is wrong.
    response = Client().get("/readyz/scheduler", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 503
    assert "no scheduler" in response.json()["checks"]["leader"]
    for node, role, epoch in (("beat-a", "leader", 7), ("beat-b", "standby", None)):
        redis_client.set(
            redis_key(f"scheduler:node:{node}"),
            json.dumps(
                {
                    "node": node,
                    "role": role,
                    "epoch": epoch,
                    "schedules": 4,
                    "fired_total": 11,
                    "published_total": 11,
                    "reported_at": time.time(),
                }
            ),
            ex=30,
        )
    try:
        response = Client().get("/readyz/scheduler")
        assert response.status_code == 200, response.json()
        samples = scrape()
        assert samples["scheduler_leader"][(("node", "beat-a"),)] == 1
        assert samples["scheduler_leader"][(("node", "beat-b"),)] == 0
        assert samples["scheduler_leader_epoch"][(("node", "beat-a"),)] == 7
        assert samples["scheduler_leaders"][()] == 1
        assert samples["scheduler_node_fires_total"][(("node", "beat-a"),)] == 11
    finally:
        redis_client.delete(redis_key("scheduler:node:beat-a"), redis_key("scheduler:node:beat-b"))


def test_readyz_names_an_unreachable_redis(settings, scrape_auth):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    from scheduler_app import redis_client

    redis_client._clients.clear()
    try:
        response = Client().get("/readyz", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        anonymous = Client().get("/readyz")
    finally:
        redis_client._clients.clear()
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == "ok"
    assert response.json()["checks"]["redis"].startswith("error:")
    # Down for anyone, but why (the error names the address) only with the credentials.
    assert (anonymous.status_code, anonymous.json()) == (503, {"status": "unavailable"})


@pytest.mark.parametrize("path", ["/readyz", "/readyz/scheduler"])
def test_readyz_tells_an_anonymous_caller_only_up_or_down(scrape_auth, path):
    """Played as anyone on the network: no check detail, no worker host name, no sandbox path
    (a wrong token or a signed-in non-staff user is anonymous here)."""
    from django.contrib.auth import get_user_model

    member = get_user_model().objects.create_user(username="curious", password="pw-123456")
    signed_in = Client()
    signed_in.force_login(member)
    for answer in (
        Client().get(path),
        Client().get(path, HTTP_AUTHORIZATION="Bearer wrong-token"),
        Client().get(path, HTTP_AUTHORIZATION="Basic " + base64.b64encode(b"prom:no").decode()),
        signed_in.get(path),
    ):
        assert set(answer.json()) == {"status"}, answer.content
        assert answer.json()["status"] == ("ok" if answer.status_code == 200 else "unavailable")
        assert b"bwrap" not in answer.content and b"checks" not in answer.content
    staff = get_user_model().objects.create_user(
        username="operator-staff", password="pw-123456", is_staff=True
    )
    staff_session = Client()
    staff_session.force_login(staff)
    for detailed in (
        Client().get(path, HTTP_AUTHORIZATION=f"Bearer {TOKEN}"),
        Client().get(
            path, HTTP_AUTHORIZATION="Basic " + base64.b64encode(b"prom:secret-pw").decode()
        ),
        staff_session.get(path),
    ):
        assert {"status", "checks", "shell_sandbox"} <= set(detailed.json()), detailed.content


def test_the_queue_age_reads_a_batch_doorbell_by_its_first_run():
    """A batch doorbell (the default: up to SCHEDULER_DOORBELL_BATCH runs per message) names
    a list of runs; the queue's age comes from the first (an alert rule failed on it)."""
    import uuid

    from scheduler_app.monitoring.system import _message_execution_id
    from scheduler_app.ringing.doorbell import Doorbell
    from scheduler_app.ringing.publish import batch_message, doorbell_message

    ids = [str(uuid.uuid4()) for _ in range(3)]
    tenant = str(uuid.uuid4())
    bells = [Doorbell(i, tenant, "bulk") for i in ids]
    assert _message_execution_id(batch_message(bells, origin="test")) == ids[0]
    assert _message_execution_id(doorbell_message(bells[1], origin="test")) == ids[1]
    assert _message_execution_id('{"body": "bm90IGpzb24="}') is None
