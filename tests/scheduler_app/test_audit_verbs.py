"""How the audit log names what was done: old route-named actions read as the verbs they
stand for, verbs read as words, and filtering by a verb finds the old spellings too."""

from __future__ import annotations

import pytest

from scheduler_app.audit_verbs import (
    KNOWN_VERBS,
    PAST,
    legacy_actions,
    verb_for_route,
    verb_of,
    verb_words,
)


@pytest.mark.parametrize(
    ("stored", "verb", "words"),
    [
        ("task-pause.post", "task.pause", "paused task"),
        ("task-list.post", "task.create", "created task"),
        ("task-detail.put", "task.update", "edited task"),
        ("task-detail.patch", "task.update", "edited task"),
        ("task-detail.delete", "task.delete", "deleted task"),
        ("dlq-retry-all.post", "dlq.retry-all", "retried every dead letter"),
        ("dlq-detail.delete", "dlq.delete", "deleted dead letter"),
        ("dag-run-cancel.post", "dag_run.cancel", "cancelled DAG run"),
        ("execution-cancel.post", "execution.cancel", "cancelled run"),
        ("apikey-detail.delete", "apikey.delete", "deleted API key"),
        # New spellings and system events read as they are.
        ("task.pause", "task.pause", "paused task"),
        ("dag_run.rerun", "dag_run.rerun", "re-ran DAG run"),
        ("quota.exceeded", "quota.exceeded", "quota exceeded"),
        ("approval.reject", "approval.reject", "rejected a DAG node"),
    ],
)
def test_stored_actions_read_as_verbs_and_words(stored, verb, words):
    assert verb_of(stored) == verb
    assert verb_words(verb_of(stored)) == words


def test_a_verb_finds_its_old_spellings():
    assert set(legacy_actions("task.create")) == {"task-list.post", "task-create.post"}
    assert "task-detail.put" in legacy_actions("task.update")
    assert "dlq-detail.delete" in legacy_actions("dlq.delete")
    assert legacy_actions("dag_run.cancel") == ["dag-run-cancel.post"]
    # Every old spelling it names reads back as the verb.
    for verb in ("task.pause", "task.update", "dag_run.cancel", "dlq.retry-all"):
        assert all(verb_of(old) == verb for old in legacy_actions(verb))


def test_a_route_is_named_as_a_verb():
    assert verb_for_route("secret-list", "POST") == "secret.create"
    assert verb_for_route("secret-detail", "PATCH") == "secret.update"
    assert verb_for_route("channel-test", "POST") == "channel.test"
    # The API calls it retry; the service, the dashboard and the log call it a re-run.
    assert verb_for_route("dag-run-retry", "POST") == "dag_run.rerun"
    assert "dag-run-retry.post" in legacy_actions("dag_run.rerun")


def test_every_known_verb_reads_in_words():
    for verb in KNOWN_VERBS:
        operation = verb.partition(".")[2]
        assert operation in PAST and verb_of(verb) == verb, verb
        assert verb_words(verb) != verb, verb
