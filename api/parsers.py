"""The API's one JSON parser: DRF's, refusing nesting deeper than API_MAX_JSON_DEPTH.

Python's decoder recurses once per level: a 1 MiB body of `{"a":{"a":...` was a RecursionError
(a 500 with a traceback), and a structure a little shallower than the interpreter's limit
broke every recursive walk after it (secret references, masking, JSON round trips).
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

_CONTAINERS = (dict, list)


def json_depth_exceeds(value: Any, limit: int) -> bool:
    """Whether containers in `value` nest more than `limit` deep.

    Level by level, without recursion; a container's children are looked at one by one only
    when `set(map(type, ...))` (C speed) says some of them are containers, so the 130,000
    strings of a 1 MiB DAG's `depends_on` lists cost milliseconds."""
    level = [value] if isinstance(value, _CONTAINERS) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below: list[Any] = []
        for container in level:
            children = container.values() if isinstance(container, dict) else container
            kinds = set(map(type, children))
            if dict in kinds or list in kinds:
                below.extend(child for child in children if type(child) in _CONTAINERS)
        level = below
    return False


class JsonRefused(ValueError):
    """JSON text that parses, but not within the API's budget: nested deeper than
    API_MAX_JSON_DEPTH, or a number of more digits than Python converts (4,300)."""


def depth_error_message() -> str:
    return f"JSON nested deeper than {settings.API_MAX_JSON_DEPTH} levels"


def json_loads_bounded(text: str) -> Any:
    """`json.loads` for JSON a person typed into a form (the dashboard's parameters and
    handler fields), refused as the API refuses a body: JsonRefused (a 100,000-deep text
    was a RecursionError, a 5,000-digit number a ValueError: both 500s), and
    json.JSONDecodeError, with its line, for text that is not JSON."""
    try:
        data = json.loads(text)
    except RecursionError as error:
        raise JsonRefused(depth_error_message()) from error
    except json.JSONDecodeError:
        raise
    except ValueError as error:  # int() refusing a number of over 4,300 digits
        raise JsonRefused("a number has more digits than can be read (4,300)") from error
    if json_depth_exceeds(data, settings.API_MAX_JSON_DEPTH):
        raise JsonRefused(depth_error_message())
    return data


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        limit = settings.API_MAX_JSON_DEPTH
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError as error:
            raise ParseError(depth_error_message()) from error
        if json_depth_exceeds(data, limit):
            raise ParseError(depth_error_message())
        return data
