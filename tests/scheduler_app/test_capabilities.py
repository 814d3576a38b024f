"""Which queue a run goes to (pure): a container run and an egress shell run each to their
capability's queue of the tier, everything else to the tier itself."""

from __future__ import annotations

import pytest

from scheduler_app.capabilities import capability_of_handler, capability_of_queue, queue_for


@pytest.mark.parametrize(
    ("handler", "capability"),
    [
        ({"type": "shell", "command": ["true"], "network": "egress"}, "egress"),
        ({"type": "shell", "command": ["true"], "network": "none"}, ""),
        ({"type": "shell", "command": ["true"]}, ""),
        ({"type": "container", "image": "alpine:3", "network": "egress"}, "container"),
        ({"type": "http", "url": "https://example.com"}, ""),
        ({"type": "python", "callable": "x"}, ""),
    ],
)
def test_the_capability_a_handler_needs(handler, capability):
    assert capability_of_handler(handler) == capability


def test_queues_by_priority_and_capability():
    assert queue_for(priority=2, capability="egress") == "critical.egress"
    assert queue_for(priority=5, capability="container") == "normal.container"
    assert queue_for(priority=9, capability="") == "bulk"
    assert capability_of_queue("bulk.egress") == "egress"
    assert capability_of_queue("worker.host") is None and capability_of_queue("normal") is None
