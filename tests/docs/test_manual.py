"""The manual (`make docs`): it builds with `mkdocs build --strict`, so a broken link or
anchor, or a page the navigation leaves out, fails `make test`; its API reference is
generated from the schema the server serves; the README stays a short front door whose
links land in it."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scripts.openapi_markdown import METHODS, operation_anchor, schema_anchor, tag_page

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=config.parent,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("manual")
    done = _build(ROOT / "mkdocs.yml", site)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}{done.stderr}"
    return site


def _text(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))


def _ids(page: Path) -> set[str]:
    return set(re.findall(r'id="([^"]+)"', page.read_text()))


def test_the_manual_builds_strictly(site):
    for page in ("index", "getting-started", "glossary", "operations/runbooks", "api/index"):
        assert (site / f"{page}.html").is_file(), page


def test_the_getting_started_page_includes_the_readme_tour(site):
    tour = README.read_text().split("[start:tour]", 1)[1].split("[end:tour]", 1)[0]
    page = _text(site / "getting-started.html")
    commands = [line.strip() for line in tour.splitlines() if line.startswith("schedctl ")]
    assert commands and all(command in page for command in commands)


@pytest.mark.django_db
def test_the_api_reference_documents_every_operation_the_server_serves(site, client):
    schema = yaml.safe_load(client.get("/api/schema/").content)
    operations = 0
    for path, item in schema["paths"].items():
        for method in METHODS:
            if method not in item:
                continue
            page = site / tag_page(item[method]["tags"][0]).replace(".md", ".html")
            assert operation_anchor(method, path) in _ids(page), (method, path)
            operations += 1
    assert operations > 50
    schemas = _ids(site / "api" / "reference" / "schemas.html")
    for name in schema["components"]["schemas"]:
        assert schema_anchor(name) in schemas, name
    # A field's constraint comes from the serializers, not from prose: the task timeout's
    # upper bound is the SCHEDULER_MAX_TASK_TIMEOUT the API enforces.
    tasks = _text(site / "api" / "reference" / "tasks.html")
    assert "timeout_seconds" in tasks and "at most 7000" in tasks


def test_a_broken_link_or_a_page_outside_the_navigation_fails_the_build(tmp_path):
    """The validation settings of mkdocs.yml, on pages of this test's (without the API
    reference's hook: it is not what is tested here)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\n[gone](missing.md) and [an anchor](other.md#nope)\n")
    (docs / "other.md").write_text("# Other\n")
    (docs / "orphan.md").write_text("# Nobody links here\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: docs\nhooks: []\n"
        "nav:\n  - Home: index.md\n  - Other: other.md\n"
    )
    done = _build(config, tmp_path / "site")
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "'missing.md'" in output
    assert "'#nope'" in output
    assert "orphan.md" in output and 'not included in the "nav"' in output


def test_the_readme_is_a_short_front_door_whose_links_land(site):
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    links = re.findall(r"\]\((docs/[^)#]+)(?:#([^)]+))?\)", text)
    assert len(links) >= 10
    for target, anchor in links:
        assert (ROOT / target).is_file(), target
        if target.endswith(".md") and anchor:
            page = site / target.removeprefix("docs/").replace(".md", ".html")
            assert anchor in _ids(page), f"{target}#{anchor}"


def test_the_glossary_defines_the_words_the_code_uses():
    glossary = (ROOT / "docs" / "glossary.md").read_text()
    terms = {line[4:].lower() for line in glossary.splitlines() if line.startswith("### ")}
    words = ["doorbell", "ring", "fire", "spill", "lane", "ledger", "lease", "epoch"]
    words += ["claim", "claim token", "presence", "fired-through mark", "shard", "tier"]
    assert [word for word in words if word not in terms] == []
