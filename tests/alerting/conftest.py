from __future__ import annotations

import uuid

import pytest

from tests.alerting.receiver import Receiver


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.server.shutdown()


@pytest.fixture
def notify_settings(settings):
    queue = f"notify-test-{uuid.uuid4().hex[:8]}"  # no test worker listens here
    settings.ALERTS = {**settings.ALERTS, "QUEUE": queue, "WEBHOOK_ALLOWED_HOSTS": ["127.0.0.1"]}
    return queue
