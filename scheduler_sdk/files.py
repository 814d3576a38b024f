"""Definitions from YAML or JSON files: the API's own shapes and those of dags/definitions/.

A file holds one definition, a YAML stream of several (`---`), or a JSON list. A mapping
with `dag` (or with a `tasks` list) is a DAG, anything else a task (`POST /api/v1/tasks`'s
body). A DAG file's `tenant` key is for the server's `sync_dags` only: the client acts for
the tenant it is logged in to, so the key is dropped before sending.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from scheduler_sdk.errors import DefinitionError

SUFFIXES = (".yaml", ".yml", ".json")
FILE_ONLY_KEYS = ("tenant",)


@dataclass(frozen=True)
class FileDefinition:
    kind: str
    name: str
    body: dict[str, Any]
    source: str

    def render(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.body))


def _documents(path: Path) -> list[Any]:
    text = path.read_text()
    try:
        if path.suffix == ".json":
            loaded = json.loads(text)
            return loaded if isinstance(loaded, list) else [loaded]
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except (ValueError, yaml.YAMLError) as error:
        raise DefinitionError(f"cannot parse: {error}", source=str(path)) from error


def definition_from_mapping(data: Any, *, source: str) -> FileDefinition:
    if not isinstance(data, dict):
        raise DefinitionError("a definition must be a mapping", source=source)
    if "dag" in data or isinstance(data.get("tasks"), list):
        name = data.get("dag", data.get("name"))
        if not isinstance(name, str) or not name.strip():
            raise DefinitionError("a DAG needs `dag: <name>`", source=source)
        body = {key: value for key, value in data.items() if key not in FILE_ONLY_KEYS}
        return FileDefinition("dag", name.strip(), body, source)
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise DefinitionError("a task needs `name`", source=source)
    return FileDefinition("task", name, dict(data), source)


def load_definitions(path: str | Path) -> list[FileDefinition]:
    """Every definition in a file, or in the YAML/JSON files under a directory (sorted)."""
    root = Path(path)
    if root.is_dir():
        files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
    elif root.is_file():
        files = [root]
    else:
        raise DefinitionError("no such file or directory", source=str(root))
    definitions = []
    for file in files:
        for index, document in enumerate(_documents(file)):
            source = f"{file}" if index == 0 else f"{file} (document {index + 1})"
            definitions.append(definition_from_mapping(document, source=source))
    return definitions
