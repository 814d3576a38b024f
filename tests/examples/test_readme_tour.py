"""The tour as a newcomer reads it: the README's quick tour (which the manual's Getting
started includes, not copies) and the design document's two examples, which the manual
posts exactly as the document writes them (the same JSON as tests/examples/document.py,
which the API tests post).

What is checked here without a running stack: every API path the tour calls is one the
server serves, and every `schedctl` command it types exists. The tour itself was run as
written against `make run`."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import click
import pytest
import yaml

from schedctl.cli import main as schedctl
from tests.examples.document import CONDITIONAL_BRANCHING_DAG, CREATE_TASK_REQUEST

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GETTING_STARTED = ROOT / "docs" / "getting-started.md"
TOUR_START, TOUR_END = "<!-- --8<-- [start:tour] -->", "<!-- --8<-- [end:tour] -->"
API_URL = re.compile(r"http://127\.0\.0\.1:8000(/api/v1/[^\s\"'?]*)")


def _readme_tour() -> str:
    text = README.read_text()
    assert TOUR_START in text and TOUR_END in text, "the README marks its tour for the manual"
    return text.split(TOUR_START, 1)[1].split(TOUR_END, 1)[0]


def _design_document_examples() -> str:
    section = GETTING_STARTED.read_text().split("## The design document's two examples", 1)[1]
    return section.split("\n## ", 1)[0]


def _bodies(text: str) -> list[dict]:
    return [json.loads(body) for body in re.findall(r"-d '\n(\{.*?\n\})'", text, re.S)]


def _served_paths(client) -> list[re.Pattern]:
    schema = yaml.safe_load(client.get("/api/schema/").content)
    return [re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$") for path in schema["paths"]]


def test_the_manual_posts_both_examples_verbatim():
    bodies = _bodies(_design_document_examples())
    assert CREATE_TASK_REQUEST in bodies
    assert CONDITIONAL_BRANCHING_DAG in bodies


def test_the_manual_includes_the_readme_tour():
    assert '--8<-- "README.md:tour"' in GETTING_STARTED.read_text()


@pytest.mark.django_db
def test_every_api_path_of_the_tour_is_served(client):
    served = _served_paths(client)
    # A placeholder (`<task id>`) stands for one path segment.
    text = re.sub(r"<[^>]+>", "x", _readme_tour() + _design_document_examples())
    called = set(API_URL.findall(text))
    # auth/token, tasks, tasks/x/executions, executions/x/logs, tasks/x/schedule-preview,
    # tasks/x/trigger, admin/dlq, channels, dags, dags/x/trigger, dags/x/executions/x.
    assert len(called) >= 10, called
    unknown = [path for path in called if not any(pattern.match(path) for pattern in served)]
    assert unknown == []


def _parse(command: click.Group, words: list[str], parent: click.Context | None = None) -> None:
    """Parse a command line as schedctl would (names, options, choices, arguments) without
    running it; a click.UsageError says what is wrong."""
    context = click.Context(command, parent=parent, info_name=parent and command.name)
    name, subcommand, rest = command.resolve_command(context, words)
    if isinstance(subcommand, click.Group):
        _parse(subcommand, rest, parent=context)
    else:
        subcommand.make_context(name, rest, parent=context)


def test_every_schedctl_command_of_the_tour_parses(tmp_path):
    tour = _readme_tour()
    # The folders the tour makes (`mkdir -p /tmp/tour`) are made here, under tmp_path.
    for folder in re.findall(r"mkdir -p (\S+)", tour):
        tour = tour.replace(folder, str(tmp_path / Path(folder).name))
        (tmp_path / Path(folder).name).mkdir()
    commands = []
    for line in tour.splitlines():
        line = line.split("#", 1)[0]
        if "schedctl " in line:
            # A placeholder (`<run id>`) stands for one argument.
            line = re.sub(r"<[^>]+>", "RUN-ID", line.split("schedctl ", 1)[1])
            commands.append(shlex.split(line))
    assert len(commands) >= 8, commands
    for words in commands:
        _parse(schedctl, words)
