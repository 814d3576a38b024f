"""What a registered python callable declares: the worker arguments it takes.

The python handler (workers.handlers.python) passes `context`, `upstream_results` and
`progress` to a function that declares them; the DAG hooks ask, before loading anything,
whether a node's function could see its upstream results at all.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from handler_contract.registry import get_handler

RESERVED_ARGUMENTS = ("context", "upstream_results")
# Also given to a function that declares it, but it does not need the upstream results.
WORKER_ARGUMENTS = (*RESERVED_ARGUMENTS, "progress")


def python_handler_reads_upstream(config: dict[str, Any]) -> bool:
    """Could the handler `config` see its DAG node's upstream results? A python function is
    given them only if it declares ``upstream_results`` or ``context`` (see the python
    handler's `_build_arguments`), so for any other the worker need not load them. True when
    in doubt (not a python handler, an unknown name, a function without a signature)."""
    name = config.get("callable")
    if config.get("type") != "python" or not isinstance(name, str):
        return True
    try:
        fn = get_handler(name)
    except KeyError:
        return True
    try:
        return _declares_reserved(fn)
    except TypeError:  # an unhashable callable object: look without the cache
        return _declares_reserved.__wrapped__(fn)


def signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    """The function's signature (None for a builtin without one), computed once per
    function: a registered handler does not change, and inspecting it on every run costs
    more than a no-op handler itself."""
    try:
        return _cached_signature(fn)
    except TypeError:  # an unhashable callable object: look without the cache
        return _cached_signature.__wrapped__(fn)


@functools.lru_cache(maxsize=1024)
def _cached_signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


@functools.lru_cache(maxsize=1024)
def _declares_reserved(fn: Callable[..., Any]) -> bool:
    sig = signature(fn)
    if sig is None:
        return True
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return any(
        param.name in RESERVED_ARGUMENTS and param.kind in kinds
        for param in sig.parameters.values()
    )
