"""PostgreSQL down: /metrics still answers, and says so (scheduler_scrape_errors{source=
"database"}, what alert SchedulerDatabaseUnavailable fires on), instead of a failed scrape
that says nothing. The outage is real: the connection is pointed at a port nothing listens
on, and the client's own connect is what fails."""

from __future__ import annotations

import socket

import pytest
from django.db import connection
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

TOKEN = "scrape-token-123"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _scrape_errors(text: str) -> dict[str, float]:
    return {
        sample.labels["source"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "scheduler_scrape_errors"
        for sample in family.samples
    }


@pytest.mark.django_db(transaction=True)
def test_a_scrape_without_postgresql_reports_the_database_as_unreadable(settings):
    settings.MONITORING = {**settings.MONITORING, "METRICS_BEARER_TOKEN": TOKEN}
    client = Client()
    up = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert up.status_code == 200
    assert _scrape_errors(up.content.decode())["database"] == 0

    real = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(_closed_port()))
    try:
        down = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(real)
    assert down.status_code == 200
    errors = _scrape_errors(down.content.decode())
    assert errors["database"] == 1
    assert errors["broker"] == 0  # not blamed on Redis
    assert "scheduler_runs_waiting" not in down.content.decode()
