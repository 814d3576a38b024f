"""The dashboard says why a run has not started: it waits for a worker offering a
capability none offers now (and when it will give up); the task page says so too."""

from __future__ import annotations

import pytest

from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task

pytestmark = pytest.mark.django_db


def test_a_waiting_container_run_says_what_it_waits_for(signed_in, tenant):
    task = make_task(
        tenant,
        name="boxed",
        schedule={"type": "manual"},
        handler={"type": "container", "image": "alpine:3", "command": ["true"]},
    )
    execution = task_trigger(task=task)
    html = signed_in.get(f"/dashboard/executions/{execution.id}").content.decode()
    assert 'id="waiting-for"' in html and "<code>container</code>" in html
    assert "no live worker offers it now" in html
    task_html = signed_in.get(f"/dashboard/tasks/{task.id}").content.decode()
    assert "no live worker offers &#x27;container&#x27;" in task_html


def test_an_ordinary_run_says_nothing_of_the_kind(signed_in, tenant):
    task = make_task(tenant, name="plain", schedule={"type": "manual"})
    execution = task_trigger(task=task)
    html = signed_in.get(f"/dashboard/executions/{execution.id}").content.decode()
    assert 'id="waiting-for"' not in html
