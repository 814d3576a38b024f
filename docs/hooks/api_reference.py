"""MkDocs hook: the API reference pages, generated from the server's OpenAPI schema at build.

`manage.py spectacular` writes the schema the server serves at `/api/schema/` (the same
generator, the project's own settings, no database or Redis needed); the pages are
rendered from it by `scripts.openapi_markdown` and added to the build as generated files.
In mkdocs.yml the navigation names `api/reference/index.md`; this hook puts the tag pages
and the schemas page beside it, so a new tag needs no change to the configuration.
A schema that cannot be generated, or that drf-spectacular warns about, fails the build.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
# MkDocs loads a hook by its file path, with only the hook's own folder on sys.path.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scripts.openapi_markdown import INDEX, reference_pages  # noqa: E402

_pages: dict[str, str] = {}


def served_schema() -> dict:
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings"}
    command = [
        sys.executable,
        str(ROOT / "manage.py"),
        "spectacular",
        "--format",
        "openapi-json",
        "--fail-on-warn",
    ]
    done = subprocess.run(
        command, cwd=ROOT, env=environment, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise PluginError(f"manage.py spectacular failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout)


def on_config(config):
    _pages.clear()
    _pages.update(reference_pages(served_schema()))
    config["nav"] = _with_reference_pages(config["nav"])
    return config


def _with_reference_pages(nav):
    """The nav entry naming the reference's index becomes a section of every page."""
    if isinstance(nav, list):
        return [_with_reference_pages(entry) for entry in nav]
    if isinstance(nav, dict):
        ((title, value),) = nav.items()
        if value == INDEX:
            return {title: list(_pages)}
        return {title: _with_reference_pages(value)}
    return nav


def on_files(files: Files, config) -> Files:
    for path, markdown in _pages.items():
        files.append(File.generated(config, path, content=markdown))
    return files
