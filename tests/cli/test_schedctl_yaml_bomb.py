"""`schedctl apply` of the review's YAML alias bomb, as a user runs it against the real stack:
refused by the client's loader (the server's own, budgets.documents) before anything is sent,
quickly, with nothing stored; and a file past the size cap is not even read."""

from __future__ import annotations

import time

import pytest

from dags.models import Dag
from scheduler_sdk.files import MAX_FILE_BYTES
from tests.cli.conftest import run_schedctl
from tests.yaml_bomb import YAML_BOMB

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _login(stack, cli_env) -> None:
    result = run_schedctl("login", "--url", stack.url, "--username", stack.username, env=cli_env)
    assert result.returncode == 0, result.stderr


def test_apply_refuses_the_alias_bomb_and_sends_nothing(stack, cli_env, tmp_path):
    _login(stack, cli_env)
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(YAML_BOMB)
    started = time.monotonic()
    result = run_schedctl("apply", "-f", str(bomb), env=cli_env)
    seconds = time.monotonic() - started
    assert result.returncode != 0
    assert "YAML anchors are not allowed (&a)" in result.stderr + result.stdout
    assert "Traceback" not in result.stderr  # a clear CLI error
    assert seconds < 15  # a process start and an import; the bomb's expansion took 16 s
    assert not Dag.platform.exists()


def test_apply_refuses_a_file_past_the_size_cap(stack, cli_env, tmp_path):
    _login(stack, cli_env)
    big = tmp_path / "big.yaml"
    big.write_text("dag: big\ndescription: " + "x" * MAX_FILE_BYTES + "\ntasks: []\n")
    result = run_schedctl("apply", "-f", str(big), env=cli_env)
    assert result.returncode != 0
    assert f"at most {MAX_FILE_BYTES} are allowed" in result.stderr + result.stdout
    assert not Dag.platform.exists()
