"""Matching log lines as the Runs page shows them: each cut into pieces, the pieces that are a
searched word marked (`<mark>` in the template, which escapes every piece)."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Piece:
    text: str
    matched: bool


def highlighted(line: str, terms: list[str]) -> list[Piece]:
    """`line` in pieces, case-insensitively matching any of `terms` (longest first)."""
    if not terms:
        return [Piece(line, False)]
    pattern = re.compile(
        "|".join(re.escape(term) for term in sorted(terms, key=len, reverse=True)), re.IGNORECASE
    )
    pieces, at = [], 0
    for match in pattern.finditer(line):
        if match.start() > at:
            pieces.append(Piece(line[at : match.start()], False))
        pieces.append(Piece(match.group(0), True))
        at = match.end()
    if at < len(line):
        pieces.append(Piece(line[at:], False))
    return pieces
