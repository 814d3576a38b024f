"""The alerts that do their runbook's first checks themselves, against the real sources:
"worker pool saturated" (runs waiting in PostgreSQL, the fleet registry in Redis, KEDA's
ScaledObjects from a local HTTPS server playing the Kubernetes API with a service account's
token and CA), and "leader failover" (a real leader lock changing hands in Redis, and a real
write probe against PostgreSQL, refused when the session is read-only as on a replica)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import ssl
import threading
import uuid
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.db import connection
from django.utils import timezone

from alerting import rules
from alerting.autoscaling import autoscaling_status
from alerting.failover import leader_failovers
from alerting.models import AlertIncident
from alerting.rules import alerts_evaluate
from alerting.saturation import pools_saturated
from alerting.services.channels import notification_channel_create
from alerting.services.write_probe import database_write_probe
from alerting.tasks import enqueue_incident_changes
from beat.lock import LeaderLock
from scheduler_app.fleet import registry
from scheduler_app.redis_client import get_redis, redis_key
from tests.alerting.test_notifications import drain
from tests.factories import make_queued_runs, make_task, make_worker_record

TOKEN = "service-account-token"
NAMESPACE = "scheduler"


@pytest.fixture(autouse=True)
def own_redis_keys(settings):
    """A key prefix of the test's own: the fleet registry and the leader locks other tests of
    this process leave in the same Redis db (a live worker's record, a shard's epoch) are not
    this test's."""
    scheduler = settings.SCHEDULER
    settings.SCHEDULER = {
        **scheduler,
        "REDIS_KEY_PREFIX": f"{scheduler['REDIS_KEY_PREFIX']}runbook-{uuid.uuid4().hex[:8]}:",
    }
    yield
    client = get_redis()
    leftovers = list(client.scan_iter(match=f"{settings.SCHEDULER['REDIS_KEY_PREFIX']}*"))
    if leftovers:
        client.delete(*leftovers)


@pytest.fixture
def fleet():
    """Fleet registry entries of the test's own, removed afterwards."""
    saved: list[str] = []

    def add(record: registry.WorkerRecord) -> None:
        registry.worker_record_save(record)
        saved.append(record.hostname)

    yield add
    client = get_redis()
    for hostname in saved:
        client.delete(redis_key(f"fleet:worker:{hostname}"))
        client.srem(redis_key("fleet:workers"), hostname)


@pytest.fixture
def thresholds(settings):
    settings.FLEET = {
        **settings.FLEET,
        "SCALE_THRESHOLDS": {"critical": 1000, "normal": 5, "bulk": 1000},
    }
    settings.ALERTS = {**settings.ALERTS, "AUTOSCALING": "auto", "FLEET_TREND_SECONDS": 300}


def _host(tag: str) -> str:
    return f"celery@{tag}-{uuid.uuid4().hex[:6]}"


@pytest.mark.django_db
def test_a_full_tier_over_its_threshold_says_what_the_runbook_checks(tenant, fleet, thresholds):
    task = make_task(tenant, name="flood")
    now = timezone.now()
    make_queued_runs(task, 8, queue="normal", due=now - timedelta(minutes=2))
    fleet(make_worker_record(_host("old"), concurrency=2, active_runs=2))
    fleet(make_worker_record(_host("new"), concurrency=2, active_runs=2, started_at=0.0))

    [saturated] = pools_saturated(now)
    assert saturated.tier == "normal" and saturated.waiting == 8
    summary = saturated.summary
    assert "8 runs waiting, 3 over its threshold of 5, the oldest waiting 120 s" in summary
    assert "workers at capacity (4/4 slots busy on 2 worker(s))" in summary
    # Outside Kubernetes, `auto` is no autoscaling.
    assert "autoscaling: not configured (not running in Kubernetes)" in summary
    # One of the two started 100 s ago (make_worker_record), the other long ago.
    assert "workers rising: yes, 1 of 2 joined in the last 300 s" in summary


@pytest.mark.django_db
def test_free_slots_or_a_queue_under_its_threshold_is_not_saturation(tenant, fleet, thresholds):
    task = make_task(tenant, name="busy")
    now = timezone.now()
    make_queued_runs(task, 8, queue="normal", due=now - timedelta(minutes=1))
    fleet(make_worker_record(_host("roomy"), concurrency=4, active_runs=1))
    assert pools_saturated(now) == []
    # Under its threshold with no worker at all: waiting, not saturated.
    make_queued_runs(task, 3, queue="bulk", due=now - timedelta(minutes=3))
    assert [s.tier for s in pools_saturated(now)] == []


@pytest.mark.django_db
def test_no_workers_at_all_is_saturation_and_nobody_is_rising(tenant, fleet, thresholds, settings):
    settings.ALERTS = {**settings.ALERTS, "AUTOSCALING": "none"}
    task = make_task(tenant, name="orphaned")
    make_queued_runs(task, 6, queue="normal", due=timezone.now())
    [saturated] = pools_saturated(timezone.now())
    assert "0/0 slots busy on 0 worker(s)" in saturated.summary
    assert "autoscaling: not configured (ALERTS_AUTOSCALING=none)" in saturated.summary
    assert "workers rising: no, none joined in the last 300 s (0 now)" in saturated.summary


@pytest.mark.django_db
def test_platform_alerts_never_reach_a_tenants_channels(
    tenant, tenant_factory, fleet, thresholds, receiver, notify_settings
):
    """The attacker: a tenant whose alert channel listens, while the fleet is saturated by
    another tenant's runs. What it saw: nothing of the platform's alert (which names tiers
    and workers), and nothing of the other tenant."""
    attacker, _ = tenant_factory("mallory")
    notification_channel_create(
        tenant=attacker, name="listen", kind="webhook", target=receiver.url + "/mallory"
    )
    task = make_task(tenant, name="flood")
    make_queued_runs(task, 9, queue="normal", due=timezone.now())
    changes = alerts_evaluate()
    saturation = [i for i, _ in changes if i.rule == "worker_pool_saturated"]
    assert [(i.key, i.tenant_id) for i in saturation] == [("normal", None)]
    enqueue_incident_changes(changes)
    drain(notify_settings)
    assert receiver.bodies("/mallory") == []
    AlertIncident.platform.filter(rule="worker_pool_saturated").delete()


# -- KEDA, through a local server playing the Kubernetes API ----------------------------------


def _self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "server.crt", directory / "server.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


SCALED_OBJECTS = {
    "apiVersion": "keda.sh/v1alpha1",
    "kind": "ScaledObjectList",
    "items": [
        {
            "metadata": {"name": "worker-normal", "namespace": NAMESPACE},
            "spec": {
                "scaleTargetRef": {"name": "worker-normal"},
                "minReplicaCount": 1,
                "maxReplicaCount": 20,
            },
        }
    ],
}


@pytest.fixture
def kubernetes_api(tmp_path, monkeypatch):
    """An HTTPS server answering the ScaledObjects list of NAMESPACE to TOKEN only (403
    otherwise, as the API server does), and a service account directory pointing at it."""
    cert, key = _self_signed(tmp_path)
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            allowed = self.headers.get("Authorization") == f"Bearer {TOKEN}"
            wanted = self.path == f"/apis/keda.sh/v1alpha1/namespaces/{NAMESPACE}/scaledobjects"
            code, body = (200, SCALED_OBJECTS) if allowed and wanted else (403, {"kind": "Status"})
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(TOKEN)
    (account / "namespace").write_text(NAMESPACE)
    (account / "ca.crt").write_bytes(cert.read_bytes())
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(server.server_address[1]))
    yield account, asked
    server.shutdown()


def test_in_a_cluster_keda_objects_are_looked_up(settings, kubernetes_api):
    account, asked = kubernetes_api
    for mode in ("keda", "auto"):
        settings.ALERTS = {**settings.ALERTS, "AUTOSCALING": mode}
        found = autoscaling_status("normal", service_account_dir=account)
        assert found.configured is True
        assert found.detail == "KEDA ScaledObject worker-normal scales it (1-20 replicas)"
        missing = autoscaling_status("bulk", service_account_dir=account)
        assert (missing.configured, missing.detail) == (
            False,
            "no KEDA ScaledObject scales worker-bulk",
        )
    assert len(asked) == 4


def test_a_refused_lookup_says_so_instead_of_guessing(settings, kubernetes_api):
    account, _ = kubernetes_api
    (account / "token").write_text("another-token")
    settings.ALERTS = {**settings.ALERTS, "AUTOSCALING": "keda"}
    refused = autoscaling_status("normal", service_account_dir=account)
    assert refused.configured is None
    assert refused.detail.startswith("KEDA's ScaledObjects could not be read: 403")


def test_keda_outside_a_cluster_is_unchecked(settings, tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    settings.ALERTS = {**settings.ALERTS, "AUTOSCALING": "keda"}
    status = autoscaling_status("normal", service_account_dir=tmp_path)
    assert status.configured is None and "outside Kubernetes" in status.detail


# -- Leader failover and the write probe --------------------------------------------------------


@pytest.fixture
def leadership(settings):
    """Real leader locks on the test's key prefix; released and forgotten afterwards."""
    locks: list[LeaderLock] = []

    def lock(node: str) -> LeaderLock:
        taken = LeaderLock(
            get_redis(),
            key_prefix=settings.SCHEDULER["REDIS_KEY_PREFIX"],
            node_id=node,
            ttl_seconds=30,
        )
        locks.append(taken)
        return taken

    yield lock
    for taken in locks:
        taken.release()
    client = get_redis()
    prefix = settings.SCHEDULER["REDIS_KEY_PREFIX"]
    client.delete(*(f"{prefix}scheduler:{k}" for k in ("leader", "epoch", "leader-info")))


@pytest.mark.django_db
def test_a_leadership_change_is_an_alert_that_says_postgresql_answers_writes(leadership):
    first = leadership("beat-a")
    assert first.try_acquire()
    # The first leader this Redis has known is no failover.
    assert leader_failovers(timezone.now()) == []
    first.release()
    second = leadership("beat-b")
    assert second.try_acquire()

    now = timezone.now()
    [failover] = leader_failovers(now)
    assert failover.key == f"shard-0:epoch-{second.epoch}"
    assert f"beat-b leads (epoch {second.epoch}, shard 0)" in failover.summary
    assert "PostgreSQL answers writes (a row written and read back in" in failover.summary
    assert failover.writes_answered is True
    # Through the evaluator: an incident of the platform's, a warning.
    [incident] = [i for i, _ in alerts_evaluate(now=now) if i.rule == "leader_failover"]
    assert (incident.key, incident.severity, incident.tenant_id) == (failover.key, "warning", None)
    # The window passes (the clock injected): resolved.
    assert leader_failovers(now + timedelta(seconds=601)) == []


@pytest.mark.django_db(transaction=True)
def test_a_database_that_refuses_writes_is_said_in_the_alert(leadership):
    """A primary that failed over to a replica answers reads and refuses writes: what a
    read-only session does, on the real server."""
    first = leadership("beat-a")
    assert first.try_acquire()
    first.release()
    assert leadership("beat-b").try_acquire()
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    try:
        probe = database_write_probe()
        [failover] = leader_failovers(timezone.now())
        [firing] = rules._leader_failovers(timezone.now())
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE")
    assert probe.answers_writes is False
    assert "read-only transaction" in probe.detail
    assert "PostgreSQL does NOT answer writes (the write was refused: " in failover.summary
    assert failover.writes_answered is False
    assert firing.severity == "critical"  # the rule's warning raised: this one pages
    assert database_write_probe().answers_writes is True
