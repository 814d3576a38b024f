"""A YAML alias bomb like the review's (509 bytes that stand for a spec of hundreds of MB),
for the tests of every place a definition is read (no Django). A valid DAG but for its
aliases: the expansion lands in `parameters`, which a loader that keeps aliases stores."""

from __future__ import annotations

import itertools

_LEVELS = "abcdefgh"
SIZE = 509


def _bomb() -> str:
    lines = [
        "dag: bomb",
        "parameters:",
        '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
    ]
    for previous, level in itertools.pairwise(_LEVELS):
        lines.append(f"  {level}: &{level} [" + ",".join([f"*{previous}"] * 9) + "]")
    lines += ["tasks:", "  - id: x", "    handler: noop"]
    text = "\n".join(lines) + "\n"
    padding = SIZE - len(text) - len("description: \n")
    return f"description: {'x' * padding}\n" + text


YAML_BOMB = _bomb()
