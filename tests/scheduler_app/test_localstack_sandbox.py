"""`make run` keeps the shell sandbox on where bubblewrap works, and says so when it cannot."""

from __future__ import annotations

import io

import pytest
from django.test import override_settings

from devstack.localstack import shell_sandbox_choice


def _worker_settings(**overrides):
    from django.conf import settings

    return {**settings.WORKER, **overrides}


@pytest.mark.needs_os_tool("bubblewrap")
def test_the_sandbox_stays_on_where_bubblewrap_works():
    env: dict[str, str] = {}
    out = io.StringIO()
    shell_sandbox_choice(env, out)
    assert "WORKER_SHELL_SANDBOX" not in env
    assert out.getvalue() == ""


def test_without_bubblewrap_it_is_turned_off_with_a_warning_line():
    env: dict[str, str] = {}
    out = io.StringIO()
    with override_settings(WORKER=_worker_settings(SHELL_BWRAP="/nonexistent/bwrap")):
        shell_sandbox_choice(env, out)
    assert env["WORKER_SHELL_SANDBOX"] == "off"
    (line,) = out.getvalue().splitlines()
    assert line.startswith("WARNING: shell sandbox unavailable") and "UNSANDBOXED" in line


def test_an_operators_explicit_choice_is_left_alone():
    env = {"WORKER_SHELL_SANDBOX": "on"}
    out = io.StringIO()
    with override_settings(WORKER=_worker_settings(SHELL_BWRAP="/nonexistent/bwrap")):
        shell_sandbox_choice(env, out)
    assert env == {"WORKER_SHELL_SANDBOX": "on"} and out.getvalue() == ""
