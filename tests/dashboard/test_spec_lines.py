"""Errors at the line: a field name of the API's validation -> the line of the text."""

from __future__ import annotations

from dashboard.spec_lines import field_path, line_of_field, parse_definition

MAX = 1024 * 1024

YAML_TEXT = """dag: etl
tasks:
  - id: a
    handler: {type: python, callable: noop}
  - id: b
    depends_on: [zzz]
    handler:
      type: shell
      command: not-a-list
"""

JSON_TEXT = """{
  "dag": "etl",
  "tasks": [
    {"id": "a", "handler": {"type": "python", "callable": "noop"}},
    {"id": "b",
     "depends_on": ["zzz"]}
  ]
}"""


def test_field_paths():
    assert field_path("tasks[2].handler.command") == ["tasks", 2, "handler", "command"]
    assert field_path("dag") == ["dag"]


def test_yaml_and_json_fields_are_found_at_their_line():
    assert line_of_field(YAML_TEXT, "tasks[1].depends_on", max_bytes=MAX) == 6
    assert line_of_field(YAML_TEXT, "tasks[1].handler.command", max_bytes=MAX) == 9
    assert line_of_field(YAML_TEXT, "tasks[0]", max_bytes=MAX) == 3
    assert line_of_field(JSON_TEXT, "tasks[1].depends_on", max_bytes=MAX) == 6
    # The deepest part that exists: a missing key points at its parent.
    assert line_of_field(YAML_TEXT, "tasks[1].retry_policy", max_bytes=MAX) == 5
    assert line_of_field(YAML_TEXT, "nowhere", max_bytes=MAX) is None


def test_a_text_that_does_not_parse_says_where():
    data, problem, line = parse_definition("dag: etl\ntasks:\n  - id: [a\n", max_bytes=MAX)
    assert data is None and "not valid YAML or JSON" in problem and line is not None
    assert parse_definition("- a list", max_bytes=MAX)[1].startswith(
        "the definition must be an object"
    )
    assert parse_definition(JSON_TEXT, max_bytes=MAX)[0]["dag"] == "etl"
