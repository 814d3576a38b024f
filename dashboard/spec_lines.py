"""Where in a YAML or JSON text an error's field is: `tasks[2].depends_on` -> its line.

Validation names fields in the API's dotted terms; a person editing the text wants the line.
The text is composed (not loaded) with PyYAML, whose nodes keep their position; JSON is
read the same way (it is YAML). Both go through the one document loader
(`budgets.documents`): size-capped, and no YAML aliases, anchors or merge keys (509 bytes of
aliases were a 124.7 MB spec). Pure: no Django; the cap comes in as an argument.
"""

from __future__ import annotations

import re

import yaml

from budgets.documents import DocumentError, yaml_compose, yaml_load

PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def field_path(field: str) -> list[str | int]:
    """`tasks[2].handler.command` -> ["tasks", 2, "handler", "command"]."""
    return [int(index) if index else name for name, index in PART.findall(field or "")]


def line_of_field(text: str, field: str | None, *, max_bytes: int) -> int | None:
    """1-based line of the deepest part of `field` found in `text` (None if not even the
    first part is there, or the text does not parse)."""
    if not field:
        return None
    try:
        node = yaml_compose(text, max_bytes=max_bytes)
    except DocumentError:
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


def parse_definition(text: str, *, max_bytes: int) -> tuple[object | None, str | None, int | None]:
    """(data, problem, line): the text read as YAML (JSON included), or why it is not (too
    large, an alias, not YAML)."""
    try:
        data = yaml_load(text, max_bytes=max_bytes)
    except DocumentError as error:
        return None, error.message, error.line
    if not isinstance(data, dict):
        return None, "the definition must be an object (dag, tasks, ...)", 1
    return data, None, None
