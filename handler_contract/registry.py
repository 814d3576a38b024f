"""Registry of python callables that tasks may run by name.

Tasks name a registered callable instead of an import path so that a task definition can
never make the worker import and run arbitrary code.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,199}$")
_registry: dict[str, Callable[..., Any]] = {}
_lock = threading.Lock()


class HandlerRegistrationError(ValueError):
    pass


def _same_function(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    # importlib.reload() recreates function objects; treat the reloaded one as the same.
    return a is b or (
        getattr(a, "__module__", None) == getattr(b, "__module__", object())
        and getattr(a, "__qualname__", None) == getattr(b, "__qualname__", object())
    )


def register(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    if not isinstance(name, str) or not _NAME.match(name):
        raise HandlerRegistrationError(
            f"invalid handler name {name!r}: use letters, digits and _ . : -"
        )
    if not callable(fn):
        raise HandlerRegistrationError(f"handler {name!r} must be callable")
    with _lock:
        existing = _registry.get(name)
        if existing is not None and not _same_function(existing, fn):
            raise HandlerRegistrationError(
                f"handler name {name!r} is already registered to "
                f"{getattr(existing, '__module__', '?')}.{getattr(existing, '__qualname__', '?')}"
            )
        _registry[name] = fn
    return fn


def handler(name: str) -> Callable[[F], F]:
    """Decorator: ``@handler("name")`` registers the function under ``name``."""

    def decorate(fn: F) -> F:
        register(name, fn)
        return fn

    return decorate


def unregister(name: str) -> None:
    """Remove a registration (mainly for tests); unknown names are ignored."""
    with _lock:
        _registry.pop(name, None)


def registered_names() -> frozenset[str]:
    with _lock:
        return frozenset(_registry)


def get_handler(name: str) -> Callable[..., Any]:
    """Return the callable registered as ``name``; ``KeyError`` if there is none."""
    with _lock:
        try:
            return _registry[name]
        except KeyError:
            raise KeyError(f"no python handler registered as {name!r}") from None
