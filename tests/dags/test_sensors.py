"""Sensors against real targets (an HTTP server, moto's S3 server, a PostgreSQL database),
polled by the housekeeping round with its clock injected: each until its condition holds,
until its timeout, and against an unreachable or private target."""

from __future__ import annotations

import time
from datetime import timedelta

import psycopg
import pytest
from django.utils import timezone

from dags.models import DagNodeState, DagRun, DagTimer
from dags.services.definitions import dag_create
from dags.services.runs import dag_run_cancel, dag_run_rerun, dag_trigger
from dags.services.sensor_rounds import sensors_poke
from scheduler_app.models import TaskExecution, Tenant
from scheduler_app.services.secrets import secret_create
from tests.dags.sensor_targets import (
    MOTO_KEYS,
    free_port,
    http_target_serving,
    moto_s3_serving,
    tenant_database_created,
)

pytestmark = pytest.mark.django_db

ECHO = {"type": "python", "callable": "upstream_echo"}


@pytest.fixture
def http_target():
    with http_target_serving() as target:
        yield target


@pytest.fixture(scope="module")
def moto_s3():
    with moto_s3_serving() as api:
        yield api


@pytest.fixture
def tenant_database():
    with tenant_database_created() as database:
        yield database


@pytest.fixture(autouse=True)
def _quick_pokes(settings):
    settings.DAG_SENSORS = {**settings.DAG_SENSORS, "POKE_TIMEOUT_SECONDS": 3.0}


def _allow_loopback(tenant, hosts=("127.0.0.1",)):
    """How the operator lets a tenant reach an internal host (as for http tasks)."""
    Tenant.objects.filter(id=tenant.id).update(webhook_allowed_hosts=list(hosts))
    tenant.refresh_from_db()


def _sensor_run(tenant, sensor, name="", **poke):
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": name or f"sensing-{sensor['kind']}",
            "tasks": [
                {"id": "wait", "type": "sensor", "sensor": sensor, **poke},
                {"id": "after", "handler": ECHO, "depends_on": ["wait"]},
            ],
        },
    )
    return dag, dag_trigger(dag=dag)


def _node(run, node_id="wait"):
    return DagNodeState.objects.get(run=run, node_id=node_id)


def _timer(run):
    return DagTimer.platform.get(run=run, node_id="wait")


# -- http -----------------------------------------------------------------------------------
def test_http_sensor_backs_off_until_status_and_jsonpath_hold(tenant, http_target):
    _allow_loopback(tenant)
    sensor = {
        "kind": "http",
        "url": http_target.url,
        "jsonpath": {"path": "$.state", "equals": "ready"},
    }
    _dag, run = _sensor_run(tenant, sensor, interval="2s", max_interval="5s", timeout="1h")
    assert _node(run).status == "sensing" and _node(run).execution_id is None
    now = timezone.now()
    # 503: not yet, the answer recorded, the next poke after the interval, which then doubles.
    assert sensors_poke(now=now).waiting == 1
    timer = _timer(run)
    assert "HTTP 503" in timer.last_error and timer.attempts == 1
    assert timer.due_at == now + timedelta(seconds=2) and timer.interval_seconds == 4
    # Not due yet: no poke.
    assert sensors_poke(now=now + timedelta(seconds=1)).waiting == 0
    assert http_target.requests == 1
    http_target.status, http_target.body = 200, {"state": "busy"}
    now = timer.due_at
    assert sensors_poke(now=now).waiting == 1
    timer = _timer(run)
    assert "does not hold yet" in timer.last_error
    assert timer.due_at == now + timedelta(seconds=4) and timer.interval_seconds == 5  # capped
    http_target.body = {"state": "ready", "version": 7}
    assert sensors_poke(now=timer.due_at).fired == 1
    assert _node(run).status == "success"
    assert _node(run).result == {"state": "ready", "version": 7}
    assert _timer(run).status == "fired" and _timer(run).attempts == 3
    assert _node(run, "after").status in ("pending", "queued")
    assert http_target.requests == 3
    # While it sensed, no execution existed: the sensor never held a worker slot.
    assert TaskExecution.platform.count() == 1


def test_http_sensor_until_timeout_follows_on_timeout(tenant, http_target):
    _allow_loopback(tenant)
    sensor = {"kind": "http", "url": http_target.url}
    _dag, failing = _sensor_run(tenant, sensor, interval="1s", timeout="10s")
    now = timezone.now()
    sensors_poke(now=now)
    deadline = _timer(failing).deadline
    assert sensors_poke(now=deadline).timed_out == 1
    node = _node(failing)
    assert node.status == "timed_out"
    assert "condition not met within 10 s (1 pokes)" in node.error_message
    assert "HTTP 503" in node.error_message  # the last answer, for the person reading it
    assert _node(failing, "after").status == "upstream_failed"
    assert DagRun.platform.get(id=failing.id).status == "failed"

    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "optional",
            "tasks": [
                {
                    "id": "wait",
                    "type": "sensor",
                    "sensor": sensor,
                    "interval": "1s",
                    "timeout": "5s",
                    "on_timeout": "skip",
                },
                {"id": "after", "handler": ECHO, "depends_on": ["wait"]},
            ],
        },
    )
    skipping = dag_trigger(dag=dag)
    assert sensors_poke(now=_timer(skipping).deadline).timed_out == 1
    assert _node(skipping).status == "skipped" and _node(skipping, "after").status == "skipped"


def test_http_sensor_unreachable_records_the_error_and_keeps_polling(tenant):
    _allow_loopback(tenant)
    closed = f"http://127.0.0.1:{free_port()}/health"
    _dag, run = _sensor_run(tenant, {"kind": "http", "url": closed}, interval="1s", timeout="1h")
    assert sensors_poke(now=timezone.now()).waiting == 1
    timer = _timer(run)
    assert "connection failed" in timer.last_error and _node(run).status == "sensing"


def test_http_sensor_to_a_private_address_is_refused_and_never_polled(tenant, http_target):
    """The attacker: a tenant whose sensor names the platform's loopback (saved while the
    host was allowed, then the operator withdrew it). The poke refuses before connecting."""
    _allow_loopback(tenant, hosts=("localhost",))
    url = f"http://localhost:{http_target.port}/health"
    _dag, run = _sensor_run(tenant, {"kind": "http", "url": url}, interval="1s")
    _allow_loopback(tenant, hosts=())
    outcome = sensors_poke(now=timezone.now())
    assert outcome.refused == 1
    node = _node(run)
    assert node.status == "failed" and node.result is None
    assert "refusing to call 'localhost'" in node.error_message
    assert "loopback" in node.error_message
    assert http_target.requests == 0  # never polled
    assert _timer(run).status == "failed"
    assert sensors_poke(now=timezone.now() + timedelta(hours=1)).waiting == 0
    assert http_target.requests == 0


# -- s3 -------------------------------------------------------------------------------------
def _s3_secrets(tenant):
    secret_create(tenant=tenant, name="s3-key", value=MOTO_KEYS["aws_access_key_id"])
    secret_create(tenant=tenant, name="s3-secret", value=MOTO_KEYS["aws_secret_access_key"])
    return {"access_key_id": "{{secret:s3-key}}", "secret_access_key": "{{secret:s3-secret}}"}


def test_s3_sensor_until_the_object_and_the_prefix_count_exist(tenant, moto_s3):
    _allow_loopback(tenant)
    client = moto_s3.client()
    bucket = f"landing-{tenant.id.hex[:8]}"
    client.create_bucket(Bucket=bucket)
    credentials = _s3_secrets(tenant)
    base = {"kind": "s3", "endpoint_url": moto_s3.endpoint_url, "bucket": bucket, **credentials}
    _dag, by_key = _sensor_run(tenant, {**base, "key": "in/day.csv"}, interval="1s")
    now = timezone.now()
    assert sensors_poke(now=now).waiting == 1
    assert "no object 'in/day.csv' yet" in _timer(by_key).last_error
    client.put_object(Bucket=bucket, Key="in/day.csv", Body=b"a,b\n1,2\n")
    assert sensors_poke(now=now + timedelta(seconds=1)).fired == 1
    assert _node(by_key).status == "success"
    assert _node(by_key).result["size"] == 8

    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "parts",
            "tasks": [
                {
                    "id": "wait",
                    "type": "sensor",
                    "sensor": {**base, "prefix": "parts/", "min_objects": 2},
                    "interval": "1s",
                }
            ],
        },
    )
    by_prefix = dag_trigger(dag=dag)
    client.put_object(Bucket=bucket, Key="parts/0", Body=b"x")
    now = timezone.now()
    assert sensors_poke(now=now).waiting == 1
    assert "1 of 2 objects" in _timer(by_prefix).last_error
    client.put_object(Bucket=bucket, Key="parts/1", Body=b"y")
    assert sensors_poke(now=now + timedelta(seconds=1)).fired == 1
    assert _node(by_prefix).result["keys"] == ["parts/0", "parts/1"]


def test_s3_sensor_until_timeout_and_unreachable(tenant, moto_s3):
    _allow_loopback(tenant)
    credentials = _s3_secrets(tenant)
    closed = f"http://127.0.0.1:{free_port()}"
    sensor = {"kind": "s3", "endpoint_url": closed, "bucket": "b", "key": "k", **credentials}
    _dag, run = _sensor_run(tenant, sensor, interval="1s", timeout="30s")
    now = timezone.now()
    assert sensors_poke(now=now).waiting == 1
    assert "unreachable" in _timer(run).last_error
    assert sensors_poke(now=_timer(run).deadline).timed_out == 1
    assert _node(run).status == "timed_out"


def test_s3_sensor_to_a_private_endpoint_is_refused(tenant, moto_s3):
    _allow_loopback(tenant)
    sensor = {"kind": "s3", "endpoint_url": moto_s3.endpoint_url, "bucket": "b", "key": "k"}
    _dag, run = _sensor_run(tenant, sensor, interval="1s")
    _allow_loopback(tenant, hosts=())
    assert sensors_poke(now=timezone.now()).refused == 1
    assert "refusing to reach '127.0.0.1'" in _node(run).error_message


# -- sql ------------------------------------------------------------------------------------
def _sql_sensor(tenant, dsn, query, **extra):
    secret_create(tenant=tenant, name="target-db", value=dsn)
    return {"kind": "sql", "dsn": "{{secret:target-db}}", "query": query, **extra}


def test_sql_sensor_until_the_query_returns_a_row(tenant, tenant_database):
    _allow_loopback(tenant)
    query = "SELECT version FROM schema_migrations WHERE version = '42'"
    _dag, run = _sensor_run(tenant, _sql_sensor(tenant, tenant_database.dsn, query), interval="1s")
    now = timezone.now()
    assert sensors_poke(now=now).waiting == 1
    assert _timer(run).last_error == "the query returned no row yet"
    tenant_database.execute("INSERT INTO schema_migrations VALUES ('42')")
    assert sensors_poke(now=now + timedelta(seconds=1)).fired == 1
    assert _node(run).status == "success" and _node(run).result == {"row": ["42"]}


def test_sql_sensor_is_read_only_and_under_a_statement_timeout(tenant, tenant_database):
    _allow_loopback(tenant)
    writes = "INSERT INTO schema_migrations VALUES ('evil') RETURNING version"
    _dag, run = _sensor_run(tenant, _sql_sensor(tenant, tenant_database.dsn, writes), interval="1s")
    now = timezone.now()
    sensors_poke(now=now)
    assert "read-only transaction" in _timer(run).last_error
    with psycopg.connect(tenant_database.dsn) as connection:
        assert connection.execute("SELECT count(*) FROM schema_migrations").fetchone() == (0,)

    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "slow",
            "tasks": [
                {
                    "id": "wait",
                    "type": "sensor",
                    "sensor": {
                        "kind": "sql",
                        "dsn": "{{secret:target-db}}",
                        "query": "SELECT pg_sleep(30)",
                        "statement_timeout": "0.3s",
                    },
                    "interval": "1s",
                    "timeout": "20s",
                }
            ],
        },
    )
    slow = dag_trigger(dag=dag)
    started = timezone.now()
    sensors_poke(now=started)
    assert (timezone.now() - started).total_seconds() < 5
    assert "statement timeout" in _timer(slow).last_error
    assert sensors_poke(now=_timer(slow).deadline).timed_out == 1
    assert _node(slow).status == "timed_out"


def test_sql_sensor_may_not_query_the_platforms_own_database(tenant, settings):
    """The attacker: a tenant pointing its sensor at the platform's database (allowed to
    reach the host, which serves its own databases too). Refused; it saw no row."""
    from django.db import connection

    _allow_loopback(tenant)
    platform = connection.settings_dict["NAME"]
    dsn = f"postgresql://postgres@127.0.0.1:5432/{platform}"
    query = "SELECT name, ciphertext FROM scheduler_app_secret LIMIT 1"
    _dag, run = _sensor_run(tenant, _sql_sensor(tenant, dsn, query), interval="1s")
    assert sensors_poke(now=timezone.now()).refused == 1
    node = _node(run)
    assert node.status == "failed" and node.result is None
    assert "it is the platform's own database" in node.error_message
    assert _timer(run).last_result is None


def test_sql_sensor_unreachable_and_private(tenant):
    _allow_loopback(tenant)
    closed = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"
    _dag, run = _sensor_run(tenant, _sql_sensor(tenant, closed, "SELECT 1"), interval="1s")
    assert sensors_poke(now=timezone.now()).waiting == 1
    assert "could not connect to 127.0.0.1" in _timer(run).last_error
    _allow_loopback(tenant, hosts=())
    assert sensors_poke(now=_timer(run).due_at).refused == 1
    assert "refusing to reach '127.0.0.1'" in _node(run).error_message


# -- budgets --------------------------------------------------------------------------------
def test_one_tenants_hanging_sensors_spend_its_budget_not_another_tenants_time(
    tenant, tenant_factory, settings
):
    """The attacker: a tenant with many sensors on a service that never answers in time. A
    round pokes at most its TENANT_POKES, for at most about its TENANT_SECONDS, on its own
    thread; the other tenant's sensor is poked at once and fires in the same round."""
    settings.DAG_SENSORS = {
        **settings.DAG_SENSORS,
        "POKE_TIMEOUT_SECONDS": 1.0,
        "TENANT_POKES": 4,
        "TENANT_SECONDS": 1.5,
    }
    victim, _user = tenant_factory("initech")
    with http_target_serving() as hanging, http_target_serving() as healthy:
        hanging.delay = 5.0
        healthy.status, healthy.body = 200, {"state": "ready"}
        _allow_loopback(tenant)
        _allow_loopback(victim)
        attacker_runs = [
            _sensor_run(tenant, {"kind": "http", "url": hanging.url}, f"s{n}", interval="1s")[1]
            for n in range(6)
        ]
        _dag, victim_run = _sensor_run(victim, {"kind": "http", "url": healthy.url}, interval="1s")
        started = time.monotonic()
        outcome = sensors_poke(now=timezone.now())
        took = time.monotonic() - started
    assert _node(victim_run).status == "success"
    assert healthy.first_request_at - started < 1.0  # not queued behind the attacker's pokes
    assert outcome.fired == 1
    # The attacker's round: within its budget (plus one poke's timeout), the rest left over.
    assert took < 6.0
    poked = [_timer(run).attempts for run in attacker_runs]
    # TENANT_POKES taken (the earliest due), a few poked, the rest released; two not taken.
    assert 1 <= sum(poked) <= 3 and outcome.released == 4 - sum(poked)
    assert all(_timer(run).lease_until is None for run in attacker_runs)
    assert all(_node(run).status == "sensing" for run in attacker_runs)
    assert any("timed out" in _timer(run).last_error for run in attacker_runs)


def test_a_cancelled_run_stops_its_sensor_unpoked(tenant, http_target):
    _allow_loopback(tenant)
    _dag, run = _sensor_run(tenant, {"kind": "http", "url": http_target.url}, interval="1s")
    dag_run_cancel(run=run)
    assert sensors_poke(now=timezone.now()).waiting == 0
    assert http_target.requests == 0
    assert _timer(run).status == "cancelled" and _node(run).status == "cancelled"


def test_a_missing_secret_refuses_the_sensor(tenant):
    _allow_loopback(tenant)
    sensor = {"kind": "sql", "dsn": "{{secret:nowhere}}", "query": "SELECT 1"}
    _dag, run = _sensor_run(tenant, sensor, interval="1s")
    assert sensors_poke(now=timezone.now()).refused == 1
    assert "no secret named nowhere" in _node(run).error_message


def test_the_run_detail_and_the_graph_show_the_next_poke_and_the_deadline(
    tenant_and_user, api, client, http_target
):
    tenant, user = tenant_and_user
    _allow_loopback(tenant)
    sensor = {"kind": "http", "url": http_target.url}
    dag, run = _sensor_run(tenant, sensor, interval="30s", timeout="6h")
    sensors_poke(now=timezone.now())
    [timer] = api.get(f"/api/v1/dags/{dag.id}/executions/{run.id}").json()["timers"]
    assert timer["kind"] == "sensor" and timer["status"] == "waiting"
    assert timer["attempts"] == 1 and "HTTP 503" in timer["last_error"]
    assert 0 < timer["seconds_left"] <= 30 and 21000 < timer["deadline_seconds_left"] <= 21600
    assert timer["interval_seconds"] == 60  # doubled after the first "not yet"
    client.force_login(user)
    page = client.get(f"/dashboard/dags/{dag.id}/runs/{run.id}").content.decode()
    assert 'data-state="sensing" data-tone="timer"' in page
    assert "poke in" in page and "timeout 5h 59m" in page
    assert 'data-timer-kind="sensor"' in page


def test_sql_sensor_cannot_commit_its_way_out_nor_set_its_own_options(tenant, tenant_database):
    """The attacker: a query that ends the read-only transaction and writes, and a DSN that
    turns the session's read-only mode off. Neither wrote a row."""
    _allow_loopback(tenant)
    escape = "COMMIT; INSERT INTO schema_migrations VALUES ('evil') RETURNING version"
    _dag, run = _sensor_run(tenant, _sql_sensor(tenant, tenant_database.dsn, escape), "a")
    sensors_poke(now=timezone.now())
    assert "cannot insert multiple commands" in _timer(run).last_error
    options = f"{tenant_database.dsn}?options=-c%20default_transaction_read_only%3Doff"
    secret_create(tenant=tenant, name="loose-db", value=options)
    sensor = {"kind": "sql", "dsn": "{{secret:loose-db}}", "query": "SELECT 1"}
    _dag, loose = _sensor_run(tenant, sensor, "b")
    assert sensors_poke(now=timezone.now()).refused == 1
    assert "dsn: options not allowed" in _node(loose).error_message
    with psycopg.connect(tenant_database.dsn) as connection:
        assert connection.execute("SELECT count(*) FROM schema_migrations").fetchone() == (0,)


def test_a_rerun_of_a_timed_out_sensor_senses_again_from_a_fresh_row(tenant, http_target):
    _allow_loopback(tenant)
    _dag, run = _sensor_run(tenant, {"kind": "http", "url": http_target.url}, interval="1s")
    sensors_poke(now=timezone.now())
    assert sensors_poke(now=_timer(run).deadline).timed_out == 1
    assert DagRun.platform.get(id=run.id).status == "failed"
    dag_run_rerun(run=DagRun.platform.get(id=run.id), triggered_by="user:ops")
    timer = _timer(run)
    assert _node(run).status == "sensing"
    assert timer.status == "waiting" and timer.attempts == 0 and timer.last_error == ""
    http_target.status, http_target.body = 200, {"state": "ready"}
    assert sensors_poke(now=timezone.now()).fired == 1
    assert _node(run).status == "success"
