"""Where in a YAML or JSON text an error's field is: `tasks[2].depends_on` -> its line.

Validation names fields in the API's dotted terms; a person editing the text wants the line.
The text is composed (not loaded) with PyYAML, whose nodes keep their position; JSON is
read the same way (it is YAML). Pure: no Django.
"""

from __future__ import annotations

import re

import yaml

PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def field_path(field: str) -> list[str | int]:
    """`tasks[2].handler.command` -> ["tasks", 2, "handler", "command"]."""
    return [int(index) if index else name for name, index in PART.findall(field or "")]


def line_of_field(text: str, field: str | None) -> int | None:
    """1-based line of the deepest part of `field` found in `text` (None if not even the
    first part is there, or the text does not parse)."""
    if not field:
        return None
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for part in field_path(field):
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            found = next((value for key, value in node.value if key.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            found = node.value[part] if part < len(node.value) else None
        else:
            found = None
        if found is None:
            break
        node = found
        line = node.start_mark.line + 1
    return line


def parse_definition(text: str) -> tuple[object | None, str | None, int | None]:
    """(data, problem, line): the text read as YAML (JSON included), or why it is not."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or str(error)
        return None, f"not valid YAML or JSON: {problem}", (mark.line + 1 if mark else None)
    except RecursionError:  # PyYAML recurses once per level: 100,000 `[` were a 500
        return None, "nested too deeply to read", None
    except ValueError as error:  # a value PyYAML cannot build: a number of 5,000 digits
        return None, f"not valid YAML or JSON: {error}", None  # or the 13th month: 500s too
    if not isinstance(data, dict):
        return None, "the definition must be an object (dag, tasks, ...)", 1
    return data, None, None
