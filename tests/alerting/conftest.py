from __future__ import annotations

import uuid

import pytest

from scheduler_app.services.tenant_network import tenant_webhook_hosts_set
from tests.alerting.receiver import Receiver


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.server.shutdown()


@pytest.fixture
def notify_settings(settings, tenant):
    """A queue of the test's own, and its receivers (on loopback) allowed: by the operator's
    list for the endpoints the operator configures (Slack's API, PagerDuty's), and for the
    test's tenant by its own list, set as the operator sets it."""
    queue = f"notify-test-{uuid.uuid4().hex[:8]}"  # no test worker listens here
    settings.ALERTS = {**settings.ALERTS, "QUEUE": queue, "WEBHOOK_ALLOWED_HOSTS": ["127.0.0.1"]}
    tenant_webhook_hosts_set(tenant=tenant, hosts=["127.0.0.1"], actor="operator:test")
    return queue
