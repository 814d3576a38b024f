"""Documents a tenant supplies (DAG and task definitions, as YAML or JSON): size-capped, and
YAML without aliases, anchors or merge keys.

YAML aliases let a document name a node again instead of writing it out, so a few hundred
bytes can stand for a structure of any size (the "billion laughs"): 509 bytes through the
dashboard's DAG editor were a 124.7 MB spec, 16 s and 1.16 GB of the web worker, and every
later read of that DAG took 10 s. `yaml.safe_load` keeps aliases (they are part of YAML, not
an unsafe tag). A definition never needs one, so the loader here refuses them, and anchors
(an anchor exists only to be aliased) and merge keys (`<<`, whose only use is to merge an
alias), at the line they are on, before any structure is built.

The caps: a document's bytes before it is parsed (`document_size_check`), and the bytes of
the JSON that would be stored from it (`stored_size_check`), which is what every later read
and every run pays for.

Parsing is libyaml's (C) when PyYAML has it, composing and constructing PyYAML's own, so the
refusal happens in Python code this module controls. Plain Python: no Django (the client reads
its files with it too).
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

try:  # libyaml's parser (C); PyYAML's pure-Python reader, scanner and parser otherwise
    from yaml._yaml import CParser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    CParser = None
_PARSING: tuple[type, ...] = (CParser,) if CParser is not None else (Reader, Scanner, Parser)

__all__ = [
    "DocumentError",
    "document_size_check",
    "stored_size_check",
    "yaml_load",
    "yaml_load_all",
]

MERGE_TAG = "tag:yaml.org,2002:merge"


class DocumentError(ValueError):
    """A document refused: `message` says why, `line` (1-based) where, when known."""

    def __init__(self, message: str, *, line: int | None = None) -> None:
        super().__init__(message if line is None else f"{message} (line {line})")
        self.message = message
        self.line = line


class NotPlainYAML(yaml.MarkedYAMLError):
    """An alias, an anchor or a merge key: valid YAML, refused."""


class _PlainComposer(Composer):
    def compose_node(self, parent, index):
        if self.check_event(AliasEvent):
            event = self.get_event()
            raise NotPlainYAML(
                None,
                None,
                f"YAML aliases are not allowed (*{event.anchor}): write the value out",
                event.start_mark,
            )
        anchor = getattr(self.peek_event(), "anchor", None)
        if anchor is not None:
            raise NotPlainYAML(
                None,
                None,
                f"YAML anchors are not allowed (&{anchor}): write the value out",
                self.peek_event().start_mark,
            )
        return super().compose_node(parent, index)


class _PlainConstructor(SafeConstructor):
    def flatten_mapping(self, node):
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                raise NotPlainYAML(
                    None, None, "YAML merge keys (<<) are not allowed", key_node.start_mark
                )
        super().flatten_mapping(node)


class PlainLoader(_PlainComposer, *_PARSING, _PlainConstructor, Resolver):
    """A safe loader without aliases, anchors or merge keys."""

    def __init__(self, stream) -> None:
        if CParser is not None:
            CParser.__init__(self, stream)
        else:  # pragma: no cover
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
        _PlainComposer.__init__(self)
        _PlainConstructor.__init__(self)
        Resolver.__init__(self)


def document_size_check(text: str | bytes, *, max_bytes: int, what: str = "the document") -> None:
    size = len(text.encode() if isinstance(text, str) else text)
    if size > max_bytes:
        raise DocumentError(f"{what} is {size} bytes; at most {max_bytes} are allowed")


def stored_size_check(value: Any, *, max_bytes: int, what: str = "the definition") -> int:
    """The bytes of `value` as stored JSON; DocumentError past `max_bytes`."""
    size = len(json.dumps(value, default=str, separators=(",", ":")).encode())
    if size > max_bytes:
        raise DocumentError(
            f"{what} is {size} bytes as stored JSON; at most {max_bytes} are allowed"
        )
    return size


def _refused(error: yaml.YAMLError) -> DocumentError:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    message = problem if isinstance(error, NotPlainYAML) else f"not valid YAML or JSON: {problem}"
    if "maximum nesting depth" in str(problem):  # libyaml's own limit on nesting
        message = "nested too deeply to read"
    return DocumentError(message, line=mark.line + 1 if mark else None)


def _unbuildable(error: Exception) -> DocumentError:
    """PyYAML recurses once per nesting level (100,000 `[` were a RecursionError, a 500) and
    raises ValueError for a value it cannot build (a 5,000-digit number, the 13th month)."""
    if isinstance(error, RecursionError):
        return DocumentError("nested too deeply to read")
    return DocumentError(f"not valid YAML or JSON: {error}")


def yaml_load(text: str, *, max_bytes: int) -> Any:
    """One YAML (or JSON) document, or DocumentError (too large, an alias, invalid)."""
    document_size_check(text, max_bytes=max_bytes)
    try:
        return yaml.load(text, Loader=PlainLoader)  # noqa: S506 - PlainLoader is a SafeLoader
    except yaml.YAMLError as error:
        raise _refused(error) from error
    except (RecursionError, ValueError) as error:
        raise _unbuildable(error) from error


def yaml_load_all(text: str, *, max_bytes: int) -> list[Any]:
    """Every document of a YAML stream (`---`), the empty ones left out."""
    document_size_check(text, max_bytes=max_bytes)
    try:
        return [
            document for document in yaml.load_all(text, Loader=PlainLoader) if document is not None
        ]
    except yaml.YAMLError as error:
        raise _refused(error) from error
    except (RecursionError, ValueError) as error:
        raise _unbuildable(error) from error


def yaml_compose(text: str, *, max_bytes: int) -> yaml.Node | None:
    """The node tree (positions kept), for finding a field's line; same refusals."""
    document_size_check(text, max_bytes=max_bytes)
    try:
        return yaml.compose(text, Loader=PlainLoader)
    except yaml.YAMLError as error:
        raise _refused(error) from error
    except RecursionError as error:
        raise _unbuildable(error) from error
