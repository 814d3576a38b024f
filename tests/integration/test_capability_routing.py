"""Runs go where they can run: a worker advertises its capabilities, a container run is
routed to `<tier>.container`, which only workers with a container runtime consume. With no
such worker the run waits, then fails `no_capable_worker` naming the capability; with one,
that worker takes it."""

from __future__ import annotations

import stat

import pytest

from scheduler_app.models import TaskExecution
from scheduler_app.services.task_definitions import task_trigger
from tests.factories import make_task
from tests.integration.conftest import dump_logs
from tests.integration.fleet_helpers import FLEET_BEAT, fleet_worker, hostname_of, registered
from tests.processes import start_beat, stop_all, wait_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("private_broker"),
]


def test_a_container_run_waits_for_a_capable_worker_then_fails_naming_the_capability(
    tenant, tmp_path
):
    beat = start_beat(  # boots while the worker does
        node_id="capabilities",
        env_overrides={**FLEET_BEAT, "SCHEDULER_CAPABILITY_WAIT_SECONDS": "3"},
    )
    plain = fleet_worker("plain")
    capable = None
    try:
        record = registered(plain)
        assert "container" not in record.capabilities
        assert {"shell", "http", "python"} <= set(record.capabilities)
        assert not any(queue.endswith(".container") for queue in record.queues)

        container = make_task(
            tenant,
            name="in-a-container",
            schedule={"type": "manual"},
            handler={"type": "container", "image": "alpine:3", "command": ["true"]},
        )
        python = make_task(tenant, name="plain-python", schedule={"type": "manual"})
        waiting = task_trigger(task=container)
        ran = task_trigger(task=python)
        assert waiting.queue == "normal.container" and ran.queue == "normal"
        wait_until(
            lambda: TaskExecution.platform.get(id=ran.id).status == "success",
            timeout=60,
            message="the python run to succeed on the plain worker",
        )
        wait_until(
            lambda: TaskExecution.platform.get(id=waiting.id).status == "failed",
            timeout=60,
            message="the container run to give up waiting",
        )
        failed = TaskExecution.platform.get(id=waiting.id)
        assert failed.error_class == "no_capable_worker"
        assert "'container'" in failed.error_message
        assert failed.worker_id == "" and failed.started_at is None
        assert failed.dead_lettered

        # A worker with a runtime joins: it advertises `container`, consumes the container
        # queues, and the next container run goes to it.
        runtime = tmp_path / "docker"
        runtime.write_text('#!/bin/sh\necho \'{"runtime": "stand-in"}\'\n')
        runtime.chmod(runtime.stat().st_mode | stat.S_IXUSR)
        capable = fleet_worker("capable", CONTAINER_RUNTIME=str(runtime))
        record = registered(capable)
        assert "container" in record.capabilities
        assert "normal.container" in record.queues
        routed = task_trigger(task=container)
        wait_until(
            lambda: TaskExecution.platform.get(id=routed.id).worker_id != "",
            timeout=60,
            message="a worker to take the container run",
        )
        assert TaskExecution.platform.get(id=routed.id).worker_id == hostname_of(capable)
    except AssertionError:
        print(dump_logs(plain, beat, *([capable] if capable else [])))
        raise
    finally:
        stop_all([p for p in (plain, beat, capable) if p is not None], timeout=10)
