"""`match()` and `search()` of RFC 9535 filters in linear time: RE2, not a backtracking engine.

A backtracking engine (Python's `re`, the `regex` package the JSONPath library ships with)
takes exponential time on patterns such as `(a|aa)*` (1.44 s at 32 characters, doubling with
each one more); RE2 matches in time linear in the text whatever the pattern, so there is no
pattern to refuse for its shape. What RE2 cannot do (backreferences, lookaround) I-Regexp
(RFC 9485, the patterns RFC 9535 allows) does not have either.

A pattern is an I-Regexp (checked by `iregexp_check`), translated for RE2 only in what `.`
means (any character but a line break: RE2's own `.` would match `\\r`), compiled with a
memory cap and cached. A pattern the data supplies (`match(@.name, $.rule.pattern)`) is held to
the same length cap as one in the query; an invalid one selects nothing, as the RFC says.
"""

from __future__ import annotations

import functools

import re2
from iregexp_check import check as iregexp_valid
from jsonpath_rfc9535.function_extensions import ExpressionType, FilterFunction

from budgets.limits import BudgetExceeded, ExpressionBudget, current_budget, spend

# RE2's program for a pattern of at most max_pattern_chars; past it the pattern is refused.
_MAX_PROGRAM_BYTES = 4 * 1024 * 1024
_CHARS_PER_UNIT = 64


class PatternRefused(ValueError):
    pass


def _translated(pattern: str) -> str:
    """I-Regexp's `.` (not \\n, not \\r) spelled for RE2, outside character classes."""
    parts: list[str] = []
    escaped = in_class = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "[":
            in_class = True
        elif char == "]":
            in_class = False
        elif char == "." and not in_class:
            parts.append(r"[^\n\r]")
            continue
        parts.append(char)
    return "".join(parts)


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> re2._Regexp:
    options = re2.Options()
    options.max_mem = _MAX_PROGRAM_BYTES
    options.log_errors = False
    return re2.compile(_translated(pattern), options)


def pattern_compile(pattern: str, *, budget: ExpressionBudget) -> re2._Regexp:
    """The compiled pattern; PatternRefused says why not (BudgetExceeded if it is too long)."""
    if len(pattern) > budget.max_pattern_chars:
        raise BudgetExceeded(
            "pattern",
            f"a regular expression is {len(pattern)} characters long; "
            f"at most {budget.max_pattern_chars} are allowed",
        )
    if not iregexp_valid(pattern):
        raise PatternRefused(f"{pattern!r} is not an I-Regexp (RFC 9485)")
    try:
        return _compiled(pattern)
    except re2.error as error:
        raise PatternRefused(f"{pattern!r} cannot be compiled: {error}") from error


class _LinearPattern(FilterFunction):
    arg_types = [ExpressionType.VALUE, ExpressionType.VALUE]
    return_type = ExpressionType.LOGICAL
    whole = True

    def __call__(self, string: object, pattern: object) -> bool:
        if not isinstance(string, str) or not isinstance(pattern, str):
            return False
        spend(1 + (len(string) + len(pattern)) // _CHARS_PER_UNIT)
        try:
            compiled = pattern_compile(pattern, budget=current_budget())
        except PatternRefused:
            return False
        try:
            found = compiled.fullmatch(string) if self.whole else compiled.search(string)
        except UnicodeEncodeError:  # a lone surrogate: not text RE2 can read
            return False
        return found is not None


class LinearMatch(_LinearPattern):
    """RFC 9535 `match()`: the whole string matches."""

    whole = True


class LinearSearch(_LinearPattern):
    """RFC 9535 `search()`: some substring matches."""

    whole = False
