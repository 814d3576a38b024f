"""Singleton and debounce on a trigger (services.flow_triggers), on real PostgreSQL: the API's
answers, two triggers at once, a debounce window moved by a test's clock, and the attacker."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.test import Client
from django.utils import timezone

from dags.services.events import event_post
from scheduler_app.models import TaskDefinition, TaskExecution
from scheduler_app.services.firing import Fire, due_pending_promote, fires_record
from scheduler_app.services.task_definitions import task_trigger_outcome
from tests.api_clients import jwt_client
from tests.factories import make_task, task_spec

pytestmark = pytest.mark.django_db

MANUAL = {"type": "manual"}


def runs_of(task: TaskDefinition) -> list[TaskExecution]:
    return list(TaskExecution.platform.filter(task=task).order_by("created_at", "scheduled_at"))


def test_a_singletons_second_trigger_answers_200_with_the_run_it_already_has(api):
    created = api.post(
        "/api/v1/tasks",
        task_spec(name="sync", schedule=MANUAL, singleton={"key": "{{parameters.account}}"}),
        format="json",
    )
    assert created.status_code == 201, created.content
    assert created.json()["singleton"] == {"key": "{{parameters.account}}"}
    task_id = created.json()["id"]
    trigger = f"/api/v1/tasks/{task_id}/trigger"
    first = api.post(trigger, {"parameters": {"account": "a-1"}}, format="json")
    again = api.post(trigger, {"parameters": {"account": "a-1"}}, format="json")
    other = api.post(trigger, {"parameters": {"account": "a-2"}}, format="json")
    assert first.status_code == 202 and first.json()["existing"] is False
    assert again.status_code == 200, again.content
    assert again.json()["execution_id"] == first.json()["execution_id"]
    assert again.json() | {"status": None} == {
        "execution_id": first.json()["execution_id"],
        "status": None,
        "joined": "singleton",
        "existing": True,
        "trigger_count": 2,
        "scheduled_at": first.json()["scheduled_at"],
    }
    assert other.status_code == 202 and other.json()["execution_id"] != first.json()["execution_id"]
    shown = api.get(f"/api/v1/executions/{first.json()['execution_id']}").json()
    assert shown["singleton_key"] == "a-1" and shown["trigger_count"] == 2


def test_a_singletons_key_is_free_again_once_its_run_ended(tenant):
    task = make_task(tenant, name="sync", schedule=MANUAL, singleton={})
    first = task_trigger_outcome(task=task).execution
    TaskExecution.platform.filter(id=first.id).update(status="success")
    second = task_trigger_outcome(task=task)
    assert second.joined == "" and second.execution.id != first.id


@pytest.mark.django_db(transaction=True)
def test_two_hundred_triggers_at_once_make_one_run(tenant):
    """Threads on their own connections, released together by a barrier: the key's advisory
    lock makes each later trigger see the first one's committed run."""
    task = make_task(tenant, name="hot", schedule=MANUAL, singleton={"key": "{{task}}"})
    threads, barrier = 8, threading.Barrier(8)
    outcomes: list[str] = []
    errors: list[BaseException] = []

    def trigger() -> None:
        try:
            barrier.wait(timeout=30)
            for _ in range(25):
                outcomes.append(task_trigger_outcome(task=task).joined)
        except BaseException as error:  # surfaced by the test thread
            errors.append(error)
        finally:
            connections.close_all()

    workers = [threading.Thread(target=trigger) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert not errors, errors
    runs = runs_of(task)
    assert len(runs) == 1, runs
    assert outcomes.count("") == 1 and outcomes.count("singleton") == 199
    assert runs[0].trigger_count == 200


def test_debounce_collapses_a_burst_into_one_run_with_the_last_parameters(tenant):
    task = make_task(
        tenant,
        name="reindex",
        schedule=MANUAL,
        debounce={"key": "{{parameters.index}}", "seconds": 30},
    )
    start = timezone.now()
    for offset, version in ((0, 1), (10, 2), (20, 3)):
        outcome = task_trigger_outcome(
            task=task,
            parameters={"index": "books", "version": version},
            now=start + timedelta(seconds=offset),
        )
    assert outcome.joined == "debounce"
    (run,) = runs_of(task)
    assert run.status == "pending" and run.trigger_count == 3
    assert run.parameters == {"index": "books", "version": 3}
    # Quiet for 30 s after the last trigger: it starts at 20 + 30, not before.
    assert run.scheduled_at == start + timedelta(seconds=50)
    assert due_pending_promote(now=start + timedelta(seconds=49), limit=10) == []
    (bell,) = due_pending_promote(now=start + timedelta(seconds=50), limit=10)
    assert bell.execution_id == str(run.id)
    # The window is over: the next trigger opens a new one.
    later = task_trigger_outcome(
        task=task, parameters={"index": "books", "version": 4}, now=start + timedelta(seconds=51)
    )
    assert later.joined == "" and later.execution.id != run.id


def test_a_steady_stream_of_triggers_starts_the_run_by_max_wait(tenant):
    task = make_task(
        tenant, name="steady", schedule=MANUAL, debounce={"seconds": 30, "max_wait_seconds": 60}
    )
    start = timezone.now()
    for offset in range(0, 100, 20):
        task_trigger_outcome(task=task, now=start + timedelta(seconds=offset))
    runs = runs_of(task)
    # The first run was due at start + 60 (its cap) and was still pending at t=80: the
    # triggers up to then joined it; none pushed it past the cap.
    assert len(runs) == 1 and runs[0].trigger_count == 5
    assert runs[0].scheduled_at == start + timedelta(seconds=60)


def test_debounce_keys_are_separate_windows(tenant):
    task = make_task(
        tenant, name="per-key", schedule=MANUAL, debounce={"key": "{{parameters.k}}", "seconds": 5}
    )
    for key in ("a", "b", "a", "b", "c"):
        task_trigger_outcome(task=task, parameters={"k": key})
    counts = sorted((run.debounce_key, run.trigger_count) for run in runs_of(task))
    assert counts == [("a", 2), ("b", 2), ("c", 1)]


def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(api):
    before = TaskDefinition.platform.count()
    for body, field in (
        ({"singleton": {"key": "{{ nope }}"}}, "singleton.key"),
        ({"debounce": {"seconds": 0}}, "debounce.seconds"),
        ({"debounce": {"seconds": 5, "max_wait_seconds": 1}}, "debounce.max_wait_seconds"),
        ({"singleton": {"key": "{{secret:db}}"}}, "singleton.key"),
    ):
        response = api.post("/api/v1/tasks", task_spec(name="bad", **body), format="json")
        assert response.status_code == 400, response.content
        assert field in response.content.decode(), (field, response.content)
    assert TaskDefinition.platform.count() == before


def test_a_key_cannot_read_a_secret_and_another_tenant_cannot_join_the_run(
    api, tenant, tenant_factory
):
    """The attacker writes a key naming the secret (refused), then passes the secret's
    reference as the parameter the key reads (refused before any run is made), then, as
    another tenant, triggers the task by id to join its run (404)."""
    api.post("/api/v1/secrets", {"name": "db", "value": "hunter2-secret"}, format="json")
    task = make_task(tenant, name="keyed", schedule=MANUAL, singleton={"key": "{{parameters.a}}"})
    trigger = f"/api/v1/tasks/{task.id}/trigger"
    leak = api.post(trigger, {"parameters": {"a": "{{secret:db}}"}}, format="json")
    assert leak.status_code == 400 and runs_of(task) == []
    honest = api.post(trigger, {"parameters": {"a": "x"}}, format="json")
    assert honest.status_code == 202
    assert "hunter2" not in str(list(TaskExecution.platform.values_list("singleton_key")))
    _, mallory = tenant_factory("globex", username="mallory")
    intruder = jwt_client(mallory)
    assert intruder.post(trigger, {"parameters": {"a": "x"}}, format="json").status_code == 404
    assert [run.trigger_count for run in runs_of(task)] == [1]


def test_the_run_page_says_the_key_and_how_many_triggers_the_run_answered(tenant, tenant_and_user):
    task = make_task(tenant, name="calm", schedule=MANUAL, debounce={"seconds": 60})
    for number in (1, 2, 3):
        run = task_trigger_outcome(task=task, parameters={"n": number}).execution
    client = Client()
    assert client.login(username=tenant_and_user[1].username, password="pw-123456")
    page = client.get(f"/dashboard/executions/{run.id}").content.decode()
    assert "Debounce key <code>calm</code>" in page
    assert "carries the last one's parameters; it starts" in page
    assert '<span id="trigger-count">3 triggers</span>' in page


def _fire(task: TaskDefinition, at):
    return Fire(
        task_id=task.id,
        tenant_id=task.tenant_id,
        scheduled_at=at,
        priority=task.priority,
        queue="normal",
        max_attempts=1,
    )


def test_a_singletons_schedule_fire_records_the_keys_run_or_is_skipped_naming_it(tenant):
    task = make_task(
        tenant,
        name="minutely",
        schedule={"type": "cron", "expression": "* * * * *"},
        parameters={"account": "a-1"},
        singleton={"key": "{{parameters.account}}"},
    )
    other = make_task(tenant, name="plain", schedule={"type": "cron", "expression": "* * * * *"})
    now = timezone.now()
    # A catch-up burst of two fires: the first records the key's run, the second is skipped.
    bells = fires_record(
        [
            _fire(task, now - timedelta(minutes=2)),
            _fire(task, now - timedelta(minutes=1)),
            _fire(other, now),
        ],
        now=now,
    )
    assert len(bells) == 2
    first, skipped = runs_of(task)
    assert (first.status, first.singleton_key) == ("queued", "a-1")
    assert skipped.status == "skipped" and "a run recorded with this fire" in skipped.error_message
    assert runs_of(other)[0].singleton_key == ""
    # A trigger joins the fire's run; the next fire is skipped naming it.
    assert task_trigger_outcome(task=task).execution.id == first.id
    assert fires_record([_fire(task, now)], now=now) == []
    latest = TaskExecution.platform.get(task=task, scheduled_at=now)
    assert latest.status == "skipped" and str(first.id) in latest.error_message
    assert TaskExecution.platform.get(id=first.id).trigger_count == 3


def test_a_burst_of_events_starts_one_debounced_run_with_the_last_payload(tenant):
    task = make_task(
        tenant,
        name="on-upload",
        schedule={"type": "event", "name": "file.uploaded"},
        debounce={"key": "{{parameters.bucket}}", "seconds": 60},
    )
    for number in range(5):
        event_post(tenant=tenant, name="file.uploaded", payload={"bucket": "b", "n": number})
    (run,) = runs_of(task)
    assert (run.status, run.trigger, run.trigger_count) == ("pending", "event", 5)
    assert run.parameters == {"bucket": "b", "n": 4}


def test_a_patch_turns_them_off_or_swaps_one_for_the_other_never_both(api, tenant):
    task = make_task(tenant, name="swap", schedule=MANUAL, singleton={})
    url = f"/api/v1/tasks/{task.id}"
    both = api.patch(url, {"debounce": {"seconds": 5}}, format="json")
    assert both.status_code == 400 and both.json()["field"] == "debounce"
    assert TaskDefinition.platform.get(id=task.id).debounce is None
    swapped = api.patch(url, {"singleton": None, "debounce": {"seconds": 5}}, format="json")
    assert swapped.status_code == 200, swapped.content
    assert (swapped.json()["singleton"], swapped.json()["debounce"]["seconds"]) == (None, 5)
    off = api.patch(url, {"debounce": None}, format="json")
    assert off.status_code == 200 and off.json()["debounce"] is None
    assert task_trigger_outcome(task=TaskDefinition.platform.get(id=task.id)).joined == ""
