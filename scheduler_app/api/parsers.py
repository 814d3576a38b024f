"""The API's one JSON parser: DRF's, refusing nesting deeper than API_MAX_JSON_DEPTH.

Python's decoder recurses once per level: a 1 MiB body of `{"a":{"a":...` was a RecursionError
(a 500 with a traceback), and a structure a little shallower than the interpreter's limit
broke every recursive walk after it (secret references, masking, JSON round trips).
"""

from __future__ import annotations

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


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        limit = settings.API_MAX_JSON_DEPTH
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError as error:
            raise ParseError(f"JSON nested deeper than {limit} levels") from error
        if json_depth_exceeds(data, limit):
            raise ParseError(f"JSON nested deeper than {limit} levels")
        return data
