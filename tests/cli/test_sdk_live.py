"""The SDK and schedctl against the live API: apply a DAG defined in Python, errors carry
the API's code/field/message, tokens are refreshed (and a rotated refresh token stored),
API keys and tenants, prune, usage errors, backfill on a server without the endpoint."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.urls import Resolver404, resolve
from rest_framework_simplejwt.tokens import AccessToken, RefreshToken

from dags.models import Dag as DagModel
from dags.selectors import dag_version_get
from scheduler_app.models import TaskDefinition
from scheduler_app.services.api_keys import api_key_create
from scheduler_app.services.tenants import membership_set, tenant_create
from scheduler_sdk import ApiError, Client, Credentials, CredentialStore, Task, interval, shell
from scheduler_sdk.errors import NotFound
from tests.cli.conftest import PASSWORD, run_schedctl
from tests.cli.test_sdk_definitions import ETL_YAML, etl_in_python

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _client(stack, tmp_path) -> Client:
    store = CredentialStore(tmp_path / "config")
    return Client.login(stack.url, username=stack.username, password=PASSWORD, store=store)


def test_the_sdk_applies_a_python_dag_equal_to_its_yaml_twin(stack, tmp_path):
    client = _client(stack, tmp_path)
    loader = Task("loader", handler=shell("echo", "{}"))
    etl = etl_in_python()
    assert etl.render() == yaml.safe_load(ETL_YAML)

    plan = client.apply([etl, loader])
    assert [(c.kind, c.name, c.action) for c in plan.changes] == [
        ("task", "loader", "create"),
        ("dag", "etl", "create"),
    ]
    dag = DagModel.platform.get(name="etl")
    assert dag_version_get(dag=dag).spec == client.dag(str(dag.id)).definition
    assert dag.timezone == "Europe/Berlin" and dag.failure_policy == "fail_all"

    again = client.plan([etl, loader])
    assert [c.action for c in again.changes] == ["unchanged", "unchanged"]
    etl.nodes["extract"].body["parameters"] = {"day": "yesterday"}
    changed = client.apply([etl, loader])
    assert [c.action for c in changed.changes] == ["unchanged", "update"]
    assert DagModel.platform.get(id=dag.id).version == dag.version + 1

    run = client.dag_trigger(str(dag.id))
    assert run.dag_id == str(dag.id) and run.status in ("running", "queued", "success")


def test_api_errors_carry_code_field_and_message(stack, tmp_path, cli_env):
    client = _client(stack, tmp_path)
    bad = Task("bad", schedule={"type": "cron", "expression": "61 * * * *"}, handler=shell("x"))
    with pytest.raises(ApiError) as caught:
        client.task_create(bad.render())
    assert caught.value.status == 400
    assert caught.value.code == "invalid"
    assert caught.value.field == "schedule.expression"
    assert "61" in caught.value.message or "minute" in caught.value.message
    assert not TaskDefinition.platform.filter(name="bad").exists()
    with pytest.raises(NotFound):
        client.task("00000000-0000-0000-0000-000000000000")

    # schedctl: one line naming the field, exit code 1; nothing applied.
    run_schedctl("login", "--url", stack.url, "--username", stack.username, env=cli_env)
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad.render()))
    result = run_schedctl("apply", "-f", str(tmp_path / "bad.yaml"), env=cli_env)
    assert result.returncode == 1
    assert "schedule.expression" in result.stderr and "[invalid]" in result.stderr
    assert not TaskDefinition.platform.filter(name="bad").exists()
    missing = run_schedctl("trigger", "no-such-task", env=cli_env)
    assert missing.returncode == 1
    assert "no task or DAG named 'no-such-task'" in missing.stderr


def test_usage_errors_exit_2_and_every_command_has_help(cli_env):
    assert run_schedctl("get", "nonsense", env=cli_env).returncode == 2
    assert run_schedctl("trigger", env=cli_env).returncode == 2
    assert run_schedctl("dlq", "retry", env=cli_env).returncode == 2
    for command in ("login", "apply", "get", "describe", "trigger", "logs", "backfill"):
        result = run_schedctl(command, "--help", env=cli_env)
        assert result.returncode == 0 and "Usage: schedctl" in result.stdout


def test_an_expired_access_token_is_refreshed_and_a_rotated_refresh_token_kept(
    stack, tmp_path, cli_env, monkeypatch
):
    # The server rotates refresh tokens (each refresh answers a new one). simplejwt reads
    # the flag from the settings object its serializers imported, so it is set there.
    from rest_framework_simplejwt import serializers as jwt_serializers

    monkeypatch.setattr(jwt_serializers.api_settings, "ROTATE_REFRESH_TOKENS", True)
    user = get_user_model().objects.get(username=stack.username)
    expired = AccessToken.for_user(user)
    expired.set_exp(lifetime=timedelta(minutes=-5))
    refresh = str(RefreshToken.for_user(user))
    store = CredentialStore(Path(cli_env["SCHEDCTL_CONFIG_DIR"]))
    store.save(
        Credentials(url=stack.url, username=user.username, access=str(expired), refresh=refresh)
    )
    result = run_schedctl("get", "tasks", "-o", "json", env=cli_env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
    stored = store.load()
    assert stored is not None
    assert stored.access != str(expired)
    assert stored.refresh and stored.refresh != refresh  # the rotated one, for next time

    # A refresh token the server refuses: a clear message, exit 1.
    store.save(Credentials(url=stack.url, access=str(expired), refresh="not-a-token"))
    result = run_schedctl("get", "tasks", env=cli_env)
    assert result.returncode == 1
    assert "run `schedctl login` again" in result.stderr


def test_api_keys_and_tenants(stack, tmp_path, cli_env):
    from scheduler_app.models import Tenant

    acme = Tenant.objects.get(slug="acme")
    TaskDefinition.platform.all().delete()
    _client(stack, tmp_path).task_create(Task("acme-only", handler=shell("true")).render())
    _, raw_key = api_key_create(tenant=acme, name="ci", role="viewer")
    env = {**cli_env, "SCHEDCTL_API_KEY": raw_key, "SCHEDCTL_URL": stack.url}
    result = run_schedctl("get", "tasks", "-o", "json", env=env)
    assert result.returncode == 0, result.stderr
    assert [task["name"] for task in json.loads(result.stdout)] == ["acme-only"]
    # `login` with a key checks it and keeps only the URL: the key stays in the environment.
    assert run_schedctl("login", "--url", stack.url, env=env).returncode == 0
    kept = (Path(cli_env["SCHEDCTL_CONFIG_DIR"]) / "credentials.json").read_text()
    assert raw_key not in kept and json.loads(kept)["url"] == stack.url
    viewer = run_schedctl("apply", "-f", str(_task_file(tmp_path, "by-key")), env=env)
    assert viewer.returncode == 1 and "[permission_denied]" in viewer.stderr

    # A user in two tenants picks one with --tenant; the login remembers it.
    other = tenant_create(slug="globex", name="Globex")
    membership_set(
        tenant=other, user=get_user_model().objects.get(username="acme-admin"), role="admin"
    )
    login = run_schedctl(
        "login", "--url", stack.url, "--username", "acme-admin", "--tenant", "globex", env=cli_env
    )
    assert login.returncode == 0, login.stderr
    assert (
        run_schedctl(
            "apply", "-f", str(_task_file(tmp_path, "globex-task")), env=cli_env
        ).returncode
        == 0
    )
    assert TaskDefinition.platform.get(name="globex-task").tenant_id == other.id
    listed = run_schedctl("--tenant", "acme", "get", "tasks", "-o", "json", env=cli_env)
    assert [t["name"] for t in json.loads(listed.stdout)] == ["acme-only"]


def _task_file(directory: Path, name: str) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(Task(name, schedule=interval("1h"), handler=shell("true")).render())
    )
    return path


def test_prune_deletes_what_the_files_no_longer_name_after_confirmation(stack, tmp_path, cli_env):
    run_schedctl("login", "--url", stack.url, "--username", stack.username, env=cli_env)
    directory = tmp_path / "defs"
    directory.mkdir()
    _task_file(directory, "keep")
    _task_file(directory, "drop")
    assert run_schedctl("apply", "-f", str(directory), env=cli_env).returncode == 0
    (directory / "drop.yaml").unlink()

    unconfirmed = run_schedctl("apply", "-f", str(directory), "--prune", env=cli_env)
    assert unconfirmed.returncode == 2 and "--yes" in unconfirmed.stderr
    dry = run_schedctl("apply", "-f", str(directory), "--prune", "--dry-run", env=cli_env)
    assert "- task drop: will be deleted" in dry.stdout
    assert TaskDefinition.platform.get(name="drop").deleted_at is None

    pruned = run_schedctl("apply", "-f", str(directory), "--prune", "--yes", env=cli_env)
    assert pruned.returncode == 0, pruned.stderr
    assert "- task drop: deleted" in pruned.stdout
    assert TaskDefinition.platform.get(name="drop").deleted_at is not None  # soft-deleted
    assert TaskDefinition.platform.get(name="keep").deleted_at is None


def test_backfill_speaks_the_contract_or_says_the_server_lacks_it(stack, tmp_path, cli_env):
    run_schedctl("login", "--url", stack.url, "--username", stack.username, env=cli_env)
    _client(stack, tmp_path).task_create(
        Task(
            "nightly", schedule={"type": "cron", "expression": "0 2 * * *"}, handler=shell("true")
        ).render()
    )
    task = TaskDefinition.platform.get(name="nightly")
    result = run_schedctl(
        "backfill",
        "nightly",
        "--from",
        "2026-01-01T00:00:00Z",
        "--to",
        "2026-01-03T00:00:00Z",
        "-o",
        "json",
        env=cli_env,
    )
    try:
        resolve(f"/api/v1/tasks/{task.id}/backfill")
    except Resolver404:
        assert result.returncode == 1
        assert "this server has no backfill endpoint" in result.stderr
        assert f"POST /api/v1/tasks/{task.id}/backfill answered 404" in result.stderr
    else:  # the endpoint has arrived: the command speaks its contract
        assert result.returncode == 0, result.stderr
        json.loads(result.stdout)


def test_a_stored_token_is_never_sent_to_another_server(stack, cli_env):
    """An attacker who gets a user to run schedctl against their server (`--url`, or
    SCHEDCTL_URL in a shared shell profile) must not receive the stored token."""
    import http.server
    import threading

    seen: list[dict[str, str]] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(dict(self.headers))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"count": 0, "next": null, "results": []}')

        def log_message(self, *args):
            pass

    attacker = http.server.HTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=attacker.serve_forever, daemon=True).start()
    try:
        assert (
            run_schedctl(
                "login", "--url", stack.url, "--username", stack.username, env=cli_env
            ).returncode
            == 0
        )
        url = f"http://127.0.0.1:{attacker.server_port}"
        for result in (
            run_schedctl("--url", url, "get", "tasks", env=cli_env),
            run_schedctl("get", "tasks", env={**cli_env, "SCHEDCTL_URL": url}),
        ):
            assert result.returncode == 1
            assert f"not logged in to {url}" in result.stderr
    finally:
        attacker.shutdown()
    assert seen == []
