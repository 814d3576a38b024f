"""The manual's API reference, rendered from the OpenAPI schema the server serves.

`docs/hooks/api_reference.py` runs `manage.py spectacular` when the manual is built and
hands the schema to `reference_pages`, so the reference is never written by hand and cannot
drift from the code: a field, an endpoint or a limit changes here when it changes in the
serializers. Pure: a dict in, Markdown out (no Django, no MkDocs).

Pages (paths relative to the manual's root): `api/reference/index.md` (overview and
authentication), one page per tag (`api/reference/<tag>.md`: every operation with its
parameters, body and answers) and `api/reference/schemas.md` (every body's fields).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

REFERENCE_DIR = "api/reference"
INDEX = f"{REFERENCE_DIR}/index.md"
SCHEMAS = f"{REFERENCE_DIR}/schemas.md"
METHODS = ("get", "post", "put", "patch", "delete")
UNTAGGED = "other"


def reference_pages(schema: dict[str, Any]) -> dict[str, str]:
    """{page path: Markdown} for the whole reference, in navigation order."""
    operations = _operations_by_tag(schema)
    pages = {INDEX: _index_page(schema, operations)}
    schemas = schema.get("components", {}).get("schemas", {})
    for tag, tagged in operations.items():
        pages[tag_page(tag)] = _tag_page(tag, tagged, schemas)
    pages[SCHEMAS] = _schemas_page(schemas)
    return pages


def tag_page(tag: str) -> str:
    return f"{REFERENCE_DIR}/{_slug(tag)}.md"


def operation_anchor(method: str, path: str) -> str:
    return _slug(f"{method} {path}")


def schema_anchor(name: str) -> str:
    return "schema-" + _slug(name)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _operations_by_tag(schema: dict[str, Any]) -> dict[str, list[tuple[str, str, dict]]]:
    grouped: dict[str, list[tuple[str, str, dict]]] = {}
    for path, item in schema.get("paths", {}).items():
        for method in METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            tag = (operation.get("tags") or [UNTAGGED])[0]
            grouped.setdefault(tag, []).append((method, path, operation))
    return dict(sorted(grouped.items()))


def _cell(text: object) -> str:
    """Text that stays inside one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|") if text not in (None, "") else ""


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _type(node: dict[str, Any] | None, from_page: str) -> str:
    """A schema node as a short type: `string (uuid)`, `array of [Task](schemas.md#...)`."""
    if not node:
        return "any JSON"
    if "$ref" in node:
        name = _ref_name(node["$ref"])
        target = "" if from_page == SCHEMAS else "schemas.md"
        return f"[{name}]({target}#{schema_anchor(name)})"
    for combinator, word in (("oneOf", " or "), ("anyOf", " or "), ("allOf", " and ")):
        if combinator in node:
            return word.join(_type(part, from_page) for part in node[combinator])
    kind = node.get("type")
    if kind == "array":
        return f"array of {_type(node.get('items'), from_page)}"
    if kind == "object" or "properties" in node:
        extra = node.get("additionalProperties")
        if node.get("properties"):
            return "object"
        if isinstance(extra, dict) and extra:
            return f"object of {_type(extra, from_page)}"
        return "object (any keys)"
    text = kind or "any JSON"
    if node.get("format"):
        text += f" ({node['format']})"
    return text


def _constraints(node: dict[str, Any]) -> list[str]:
    notes = []
    if node.get("enum"):
        notes.append("one of " + ", ".join(f"`{value}`" for value in node["enum"]))
    for key, word in (
        ("minLength", "at least {} characters"),
        ("maxLength", "at most {} characters"),
        ("minimum", "at least {}"),
        ("maximum", "at most {}"),
        ("minItems", "at least {} items"),
        ("maxItems", "at most {} items"),
        ("pattern", "matches `{}`"),
    ):
        if key in node:
            notes.append(word.format(node[key]))
    if "default" in node:
        notes.append(f"default `{json.dumps(node['default'])}`")
    if node.get("nullable"):
        notes.append("may be null")
    if node.get("readOnly"):
        notes.append("read-only")
    if node.get("writeOnly"):
        notes.append("write-only")
    return notes


def _fields_table(node: dict[str, Any], from_page: str) -> list[str]:
    properties = node.get("properties") or {}
    if not properties:
        return []
    required = set(node.get("required", []))
    rows = ["| Field | Type | Required | Notes |", "|---|---|---|---|"]
    for name, field in properties.items():
        notes = [_cell(field.get("description", "")), *_constraints(field)]
        rows.append(
            f"| `{name}` | {_type(field, from_page)} | {'yes' if name in required else ''} "
            f"| {'; '.join(n for n in notes if n)} |"
        )
    return rows


def _index_page(schema: dict[str, Any], operations: dict[str, list]) -> str:
    info = schema.get("info", {})
    lines = [
        "# API reference",
        "",
        "Generated when the manual is built from the OpenAPI schema the server serves "
        "(`manage.py spectacular`, the same document as `GET /api/schema/`), so it is the "
        "code's own description: every path, parameter, body and answer. The guide to "
        "using the API (authentication, roles, errors, limits) is [the API](../index.md).",
        "",
        f"**{info.get('title', 'API')}**, version {info.get('version', '?')}. "
        f"{info.get('description', '')}",
        "",
        "## Authentication",
        "",
        "| Scheme | How it is sent |",
        "|---|---|",
    ]
    for name, scheme in schema.get("components", {}).get("securitySchemes", {}).items():
        if scheme.get("type") == "http":
            how = f"`Authorization: {scheme.get('scheme', '').title()} <token>`"
            if scheme.get("bearerFormat"):
                how += f" ({scheme['bearerFormat']})"
        else:
            how = f"{scheme.get('in', '')} `{scheme.get('name', '')}`"
        description = scheme.get("description")
        lines.append(f"| `{name}` | {how}{': ' + _cell(description) if description else ''} |")
    lines += ["", "## Endpoints by tag", "", "| Tag | Operations |", "|---|---|"]
    for tag, tagged in operations.items():
        names = ", ".join(
            f"[`{method.upper()} {path}`]({_slug(tag)}.md#{operation_anchor(method, path)})"
            for method, path, _ in tagged
        )
        lines.append(f"| [{tag_title(tag)}]({_slug(tag)}.md) | {names} |")
    lines += ["", "Every body and answer is described field by field in [Schemas](schemas.md)."]
    return "\n".join(lines) + "\n"


def _parameters(operation: dict[str, Any], page: str) -> list[str]:
    parameters = operation.get("parameters") or []
    if not parameters:
        return []
    rows = [
        "**Parameters**",
        "",
        "| Name | In | Type | Required | Notes |",
        "|---|---|---|---|---|",
    ]
    for parameter in parameters:
        node = parameter.get("schema", {})
        notes = [_cell(parameter.get("description", "")), *_constraints(node)]
        rows.append(
            f"| `{parameter['name']}` | {parameter.get('in', '')} | {_type(node, page)} "
            f"| {'yes' if parameter.get('required') else ''} "
            f"| {'; '.join(n for n in notes if n)} |"
        )
    return [*rows, ""]


def _body(operation: dict[str, Any], page: str, schemas: dict[str, Any]) -> list[str]:
    """The body's media types, and the fields of its JSON schema right there (the schema's
    own section on the schemas page has the same table)."""
    body = operation.get("requestBody")
    if not body:
        return []
    lines = [f"**Request body**{' (required)' if body.get('required') else ''}", ""]
    for media, content in body.get("content", {}).items():
        lines.append(f"- `{media}`: {_type(content.get('schema'), page)}")
    json_schema = body.get("content", {}).get("application/json", {}).get("schema", {})
    if "$ref" in json_schema:
        json_schema = schemas.get(_ref_name(json_schema["$ref"]), {})
    table = _fields_table(json_schema, page)
    return [*lines, "", *table, ""] if table else [*lines, ""]


def _responses(operation: dict[str, Any], page: str) -> list[str]:
    rows = ["**Responses**", "", "| Status | Body | Description |", "|---|---|---|"]
    for status, response in operation.get("responses", {}).items():
        bodies = [
            f"`{media}`: {_type(content.get('schema'), page)}"
            for media, content in (response.get("content") or {}).items()
        ]
        rows.append(
            f"| {status} | {'<br>'.join(bodies) or 'none'} "
            f"| {_cell(response.get('description', ''))} |"
        )
    return [*rows, ""]


def tag_title(tag: str) -> str:
    return tag.replace("-", " ").capitalize().replace("Api ", "API ")


def _tag_page(
    tag: str, operations: Iterable[tuple[str, str, dict]], schemas: dict[str, Any]
) -> str:
    page = tag_page(tag)
    lines = [
        f"# {tag_title(tag)}",
        "",
        "Generated from the OpenAPI schema; see the [reference](index.md).",
        "",
    ]
    for method, path, operation in operations:
        lines += [f"## `{method.upper()} {path}` {{#{operation_anchor(method, path)}}}", ""]
        if operation.get("summary"):
            lines += [operation["summary"], ""]
        if operation.get("description"):
            lines += [operation["description"].strip(), ""]
        lines += [f"Operation id `{operation.get('operationId', '')}`.", ""]
        security = [name for entry in operation.get("security", []) for name in entry]
        if security:
            lines += ["Authentication: " + ", ".join(f"`{name}`" for name in security) + ".", ""]
        if operation.get("deprecated"):
            lines += ["**Deprecated.**", ""]
        lines += _parameters(operation, page) + _body(operation, page, schemas)
        lines += _responses(operation, page)
    return "\n".join(lines) + "\n"


def _schemas_page(schemas: dict[str, Any]) -> str:
    lines = [
        "# Schemas",
        "",
        "The bodies the API takes and answers, generated from its OpenAPI schema. A body "
        "that refuses unknown keys says so (`additionalProperties: false`).",
        "",
    ]
    for name, node in sorted(schemas.items()):
        lines += [f"## {name} {{#{schema_anchor(name)}}}", ""]
        if node.get("description"):
            lines += [node["description"].strip(), ""]
        table = _fields_table(node, SCHEMAS)
        if table:
            lines += [*table, ""]
        else:
            kind = _type(node, SCHEMAS)
            notes = _constraints(node)
            lines += [f"Type: {kind}{'; ' + '; '.join(notes) if notes else ''}.", ""]
        if node.get("additionalProperties") is False:
            lines += ["Unknown keys are refused (400 naming each).", ""]
    return "\n".join(lines) + "\n"
