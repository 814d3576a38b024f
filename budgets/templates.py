"""Dotted paths and `{{ ... }}` templates, under the expression budget.

A dotted path (`classify.result.items.0`, `parameters.region`) is at most `max_chars`
characters of at most `max_segments` parts. A template's placeholders are found in linear time,
each one's path is a dotted path under the same budget, and rendering stops
once the output would pass `max_output_chars` (a value of 1 MiB, or one placed many times,
would otherwise be copied into every rendered key).

Used by the DAG definition (a condition's or a `map_over`'s `field`) and by task idempotency
keys; a later templated flow-control key (`{{ parameters.customer_id }}`) uses the same.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from budgets.limits import BudgetExceeded, ExpressionBudget, text_check

# Linear: the inside cannot hold a brace, so an attempt from one `{{` never scans past the
# next brace, and the spaces are stripped afterwards (`\s*(.*?)\s*` would backtrack).
_PLACEHOLDER = re.compile(r"\{\{([^{}]*)\}\}")


@dataclass(frozen=True)
class Placeholder:
    start: int  # where `{{` is
    end: int  # just after `}}`
    name: str  # what is between them, without surrounding spaces


def dotted_path_check(path: str, *, budget: ExpressionBudget) -> list[str]:
    """Its parts; BudgetExceeded past the budget's length or segments."""
    text_check(path, budget=budget, what="the path")
    parts = path.split(".")
    if len(parts) > budget.max_segments:
        raise BudgetExceeded(
            "segments",
            f"the path has {len(parts)} parts; at most {budget.max_segments} are allowed",
        )
    return parts


def template_placeholders(template: str, *, budget: ExpressionBudget) -> list[Placeholder]:
    """The placeholders of a template, in order. A `{{` never closed, or with a brace
    inside, is not a placeholder (it stays text)."""
    text_check(template, budget=budget, what="the template")
    found = [
        Placeholder(match.start(), match.end(), match.group(1).strip())
        for match in _PLACEHOLDER.finditer(template)
    ]
    for placeholder in found:
        dotted_path_check(placeholder.name, budget=budget)
    if len(found) > budget.max_segments:
        raise BudgetExceeded(
            "segments",
            f"the template has {len(found)} placeholders; at most {budget.max_segments} "
            "are allowed",
        )
    return found


def template_render(template: str, *, fill: Callable[[str], str], budget: ExpressionBudget) -> str:
    """The template with each placeholder replaced by `fill(name)`; BudgetExceeded once the
    output would pass `max_output_chars` (checked as each piece is added, so an oversize
    value is never copied into the output)."""
    pieces: list[str] = []
    size = 0
    position = 0
    for placeholder in template_placeholders(template, budget=budget):
        for piece in (template[position : placeholder.start], fill(placeholder.name)):
            size += len(piece)
            if size > budget.max_output_chars:
                raise BudgetExceeded(
                    "output",
                    f"the rendered text would be longer than {budget.max_output_chars} "
                    "characters (the output budget)",
                )
            pieces.append(piece)
        position = placeholder.end
    pieces.append(template[position:])
    size += len(template) - position
    if size > budget.max_output_chars:
        raise BudgetExceeded(
            "output",
            f"the rendered text would be longer than {budget.max_output_chars} characters "
            "(the output budget)",
        )
    return "".join(pieces)
