"""The error of a DAG definition that does not validate (pure Python: no Django)."""

from __future__ import annotations


class DagSpecError(ValueError):
    """`field` names the place in the definition's own terms (`tasks[2].depends_on`)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
