"""The README's quick tour posts the design document's two examples exactly as the document
writes them (the same JSON as tests/examples/document.py, which the API tests post)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.examples.document import CONDITIONAL_BRANCHING_DAG, CREATE_TASK_REQUEST

README = Path(__file__).resolve().parents[2] / "README.md"


def _tour_bodies() -> list[dict]:
    tour = README.read_text().split("## Quick tour", 1)[1].split("\n## ", 1)[0]
    return [json.loads(body) for body in re.findall(r"-d '\n(\{.*?\n\})'", tour, re.S)]


def test_the_tour_posts_both_examples_verbatim():
    bodies = _tour_bodies()
    assert CREATE_TASK_REQUEST in bodies
    assert CONDITIONAL_BRANCHING_DAG in bodies
