"""`schedctl trigger` of a singleton and a debounced task, as real processes against the live
API: the second trigger says it joined the run the key already had. No worker: the runs stay
queued or pending, which is what makes the key's run the one a trigger joins."""

from __future__ import annotations

import json

import pytest

from scheduler_app.models import TaskExecution
from tests.cli.conftest import PASSWORD, run_schedctl

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TASKS = {
    "once": {"singleton": {"key": "{{parameters.account}}"}},
    "calm": {"debounce": {"key": "{{task}}", "seconds": 600}},
}


def _ok(result) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_trigger_prints_that_a_singleton_or_a_debounce_joined_the_keys_run(
    live_server, cli_env, tmp_path
):
    from scheduler_app.services.tenants import tenant_create_with_admin

    tenant_create_with_admin(slug="acme", username="acme-admin", password=PASSWORD)
    _ok(run_schedctl("login", "--url", live_server.url, "--username", "acme-admin", env=cli_env))
    for name, flow in TASKS.items():
        spec = {
            "name": name,
            "schedule": {"type": "manual"},
            "handler": {"type": "python", "callable": "noop"},
            **flow,
        }
        (tmp_path / f"{name}.json").write_text(json.dumps(spec))
        _ok(run_schedctl("apply", "-f", str(tmp_path / f"{name}.json"), env=cli_env))

    first = _ok(run_schedctl("trigger", "once", "-p", "account=a1", env=cli_env))
    again = _ok(run_schedctl("trigger", "once", "-p", "account=a1", env=cli_env))
    (run,) = TaskExecution.platform.filter(task__name="once")
    assert first.strip() == f"triggered task once: run {run.id}"
    assert again.strip() == (
        f"triggered task once: run {run.id} (singleton: already queued, not a new run; 2 triggers)"
    )

    opened = _ok(run_schedctl("trigger", "calm", "-p", "n=1", env=cli_env))
    joined = _ok(run_schedctl("trigger", "calm", "-p", "n=2", env=cli_env))
    (pending,) = TaskExecution.platform.filter(task__name="calm")
    assert "(debounced: starts " in opened and str(pending.id) in opened
    assert "(debounced into the pending run: 2 triggers, the last one's parameters" in joined
    assert pending.parameters == {"n": 2} or pending.parameters == {"n": "2"}
