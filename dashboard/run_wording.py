"""How a run's end reads: one sentence, not a status word and a reason that repeat each other.

A cancelled run's record holds error_class `cancelled` and the message "cancelled after
23.0s"; printed side by side (as the runs list did) that read "cancelled cancelled after
23.0s". The rules here: the class is said only when the message does not already start with
it, and a number glued to its unit gets the space the rest of the dashboard writes
("23.0 s"). A DAG run that ended partly or wholly failed names what failed and what never ran
(`dag_outcome_text`), so "Partially completed" is never left unexplained.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_GLUED_UNIT = re.compile(r"(\d)(ms|s)\b")
# Node states that ended the node badly, and how a sentence says them.
FAILED_WORDS = {"failed": "failed", "timed_out": "timed out", "cancelled": "cancelled"}
# Node states of a node that never ran because of an upstream's failure.
NOT_RUN = ("upstream_failed",)
NAMED_AT_MOST = 3


def error_text(error_class: str, error_message: str) -> str:
    """What went wrong, said once: "cancelled after 23.0 s", "http_error: 503 from …"."""
    message = _GLUED_UNIT.sub(r"\1 \2", (error_message or "").strip())
    label = (error_class or "").strip()
    if not label:
        return message
    if not message:
        return label.replace("_", " ")
    spoken = label.replace("_", " ").lower()
    if message.lower().startswith((label.lower(), spoken)):
        return message
    return f"{label}: {message}"


def _names(node_ids: Sequence[str]) -> str:
    shown = list(node_ids[:NAMED_AT_MOST])
    more = len(node_ids) - len(shown)
    text = ", ".join(shown)
    return f"{text} and {more} more" if more else text


def dag_outcome_text(failed: Sequence[tuple[str, str]], not_run: Sequence[str]) -> str:
    """`failed`: (node id, node state) of the nodes that ended badly; `not_run`: the nodes
    that never ran because of them. "transform failed, load not run"."""
    parts = []
    by_word: dict[str, list[str]] = {}
    for node_id, status in failed:
        by_word.setdefault(FAILED_WORDS.get(status, status.replace("_", " ")), []).append(node_id)
    for word, node_ids in by_word.items():
        parts.append(f"{_names(node_ids)} {word}")
    if not_run:
        parts.append(f"{_names(list(not_run))} not run")
    return ", ".join(parts)
