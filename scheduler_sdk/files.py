"""Definitions from YAML or JSON files: the API's own shapes and those of dags/definitions/.

A file holds one definition, a YAML stream of several (`---`), or a JSON list. A mapping
with `dag` (or with a `tasks` list) is a DAG, anything else a task (`POST /api/v1/tasks`'s
body). A DAG file's `tenant` key is for the server's `sync_dags` only: the client acts for
the tenant it is logged in to, so the key is dropped before sending.

Files are read by the server's own document loader (`budgets.documents`): at most
MAX_FILE_BYTES, and YAML without aliases, anchors or merge keys, refused here before
anything is sent (a few hundred bytes of aliases can stand for a structure of any size).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from budgets.documents import DocumentError, document_size_check, yaml_load_all
from scheduler_sdk.errors import DefinitionError

SUFFIXES = (".yaml", ".yml", ".json")
# The server's default DEFINITION_MAX_DOCUMENT_BYTES: a larger file would be refused there.
MAX_FILE_BYTES = 1024 * 1024
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
    try:
        if path.stat().st_size > MAX_FILE_BYTES:  # not even read
            raise DocumentError(
                f"the file is {path.stat().st_size} bytes; at most {MAX_FILE_BYTES} are allowed"
            )
        text = path.read_text()
        if path.suffix == ".json":
            document_size_check(text, max_bytes=MAX_FILE_BYTES)
            loaded = json.loads(text)
            return loaded if isinstance(loaded, list) else [loaded]
        return yaml_load_all(text, max_bytes=MAX_FILE_BYTES)
    except ValueError as error:  # DocumentError and JSONDecodeError are ValueErrors
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
