"""How a scheduler engine is tuned: tick, batches, catch-up, the lock, ringing ahead
(`SCHEDULER_*` settings, read by `beat.scheduler`; tests build their own)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from scheduler_app.services.claims import CLAIM_CLOCK_TOLERANCE


@dataclass(frozen=True)
class EngineConfig:
    tick_seconds: float
    batch_size: int
    catchup_window_seconds: float
    requeue_grace_seconds: float
    housekeeping_seconds: float
    lock_ttl_seconds: float
    # How often a standby tries the lock: a SIGKILLed leader is replaced within TTL + this.
    lock_try_seconds: float = 0.25
    # Fires (overlap `allow`) are recorded and rung this long before they fall due, so that
    # a worker has claimed a run by its time and starts the handler then (`workers.due`).
    fire_ahead_seconds: float = 0.0
    # A burst that takes longer than that to ring rings earlier, up to this long before it
    # falls due (`beat.lead`); at or under fire_ahead_seconds, the lead never grows.
    fire_ahead_max_seconds: float = 0.0

    def __post_init__(self) -> None:
        limit = CLAIM_CLOCK_TOLERANCE.total_seconds()
        if not 0 <= self.fire_ahead_seconds < limit:
            raise ValueError(
                f"fire_ahead_seconds must be in [0, {limit}): no claim takes a run due later"
            )
        if not self.fire_ahead_max_seconds < limit:
            raise ValueError(
                f"fire_ahead_max_seconds must be under {limit}: no claim takes a run due later"
            )

    @property
    def most_extra_lead(self) -> timedelta:
        """How much earlier than fire_ahead_seconds a burst may ring."""
        return timedelta(seconds=max(0.0, self.fire_ahead_max_seconds - self.fire_ahead_seconds))

    @property
    def late_grace(self) -> timedelta:
        """Fires younger than this are owed whatever the catch-up policy: a standby shadows
        the leader two TTLs behind, so a takeover re-owes up to that much."""
        return timedelta(seconds=2 * self.lock_ttl_seconds + 2 * self.tick_seconds + 1)
