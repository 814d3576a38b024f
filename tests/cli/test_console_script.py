"""`schedctl` is a console script of the environment `make` builds (pyproject.toml's
[project.scripts]; the Makefile's venv stamp installs the project editable, no deps)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from tests.processes import ROOT


def test_pyproject_declares_the_console_script_and_the_client_packages():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"] == {"schedctl": "schedctl.cli:main"}
    found = project["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {"schedctl", "scheduler_sdk"} <= set(found)


def test_schedctl_is_installed_next_to_this_python(tmp_path):
    script = Path(sys.executable).parent / "schedctl"
    assert script.exists(), (
        f"no {script}: the environment was not built by `make` (its venv stamp runs "
        "`pip install --no-deps -e .`)"
    )
    result = subprocess.run(
        [str(script), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "SCHEDCTL_CONFIG_DIR": str(tmp_path)},
        cwd=tmp_path,  # not the checkout: the installed package must import on its own
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: schedctl")
