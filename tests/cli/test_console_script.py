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


def test_the_client_packages_import_only_their_declared_dependencies():
    """schedctl and scheduler_sdk run on a user's machine with `pip install .`: nothing of the
    server (Django, Celery, the project's apps), only the dependencies pyproject declares."""
    import ast

    allowed = set(sys.stdlib_module_names) | {"click", "requests", "yaml"}
    # budgets.documents, the YAML loader the client reads definition files with, ships in the
    # same distribution (pyproject.toml) and needs only PyYAML; the rest of budgets is the
    # server's.
    allowed |= {"schedctl", "scheduler_sdk", "budgets"}
    imported: dict[str, set[str]] = {}
    client_files = [
        *(ROOT / "schedctl").rglob("*.py"),
        *(ROOT / "scheduler_sdk").rglob("*.py"),
        ROOT / "budgets" / "__init__.py",
        ROOT / "budgets" / "documents.py",
    ]
    for path in client_files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                imported.setdefault(name.split(".")[0], set()).add(path.name)
    assert {name: files for name, files in imported.items() if name not in allowed} == {}
    assert {"click", "requests", "yaml"} <= set(imported)
