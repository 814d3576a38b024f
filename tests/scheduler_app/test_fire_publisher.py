"""The background publisher the leader uses to overlap publishing with recording."""

from __future__ import annotations

import pytest
from django.conf import settings

from beat import publisher as publisher_module
from beat.publisher import FirePublisher
from scheduler_app.ringing.doorbell import Doorbell
from scheduler_app.ringing.ring import Rung

pytestmark = pytest.mark.django_db(transaction=True)


def _bells(count: int, prefix: str) -> list[Doorbell]:
    return [Doorbell(f"{prefix}-{i}", "tenant", "normal") for i in range(count)]


def test_drain_counts_every_batch_and_reraises_the_first_failure(monkeypatch):
    calls: list[str] = []

    def ring_deferring_hold_back(bells, *, sticky, batch, processes):
        assert sticky is False  # first attempts never have a previous worker
        assert batch == settings.SCHEDULER["DOORBELL_BATCH"]
        calls.append(bells[0].execution_id)
        if bells[0].execution_id.startswith("bad"):
            raise ConnectionError(bells[0].execution_id)
        return Rung(len(bells), [])

    monkeypatch.setattr(publisher_module, "ring_deferring_hold_back", ring_deferring_hold_back)
    fire_publisher = FirePublisher()
    try:
        fire_publisher.submit(_bells(3, "ok"))
        fire_publisher.submit(_bells(2, "bad1"))
        fire_publisher.submit(_bells(4, "later"))
        fire_publisher.submit(_bells(1, "bad2"))
        with pytest.raises(ConnectionError, match="bad1"):
            fire_publisher.drain()
        # Every batch ran, in order, even after the first failure.
        assert calls == ["ok-0", "bad1-0", "later-0", "bad2-0"]
        fire_publisher.submit(_bells(5, "next"))
        assert fire_publisher.drain() == 5  # a failed tick leaves nothing behind
    finally:
        fire_publisher.close()


def test_drain_with_nothing_submitted_is_zero():
    assert FirePublisher().drain() == 0
