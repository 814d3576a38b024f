"""The beat's housekeeping as a registry: each app adds its chores in its `AppConfig.ready`,
and the beat runs them every SCHEDULER_HOUSEKEEPING_SECONDS (`beat.engine`). The beat knows
no app's chores by name; an app that is not installed adds none.

A chore takes the beat's clock (`now`) and does one bounded round of its work; a failure
is logged by the beat and the next round tries again, the other chores go on. Chores run in
the order they were registered (INSTALLED_APPS order), the fleet's first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Chore:
    name: str
    run: Callable[[datetime], object]
    # Only the leader runs it (work on shared state that one process should do); otherwise
    # every beat does (idempotent chores that must not wait for an election).
    leader_only: bool = True


_chores: dict[str, Chore] = {}


def chore_register(chore: Chore) -> None:
    """Add (or replace, by name: `ready` may run twice in tests) a chore."""
    _chores[chore.name] = chore


def chores() -> tuple[Chore, ...]:
    return tuple(_chores.values())
