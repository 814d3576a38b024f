"""Retry delays for the four backoff policies (pure)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from scheduler_app.choices import Backoff


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int
    backoff: str
    base_delay_seconds: float
    max_delay_seconds: float


def retry_delay_seconds(
    policy: RetryPolicy, *, failed_attempt: int, rng: random.Random | None = None
) -> float:
    """Delay before attempt `failed_attempt + 1`.

    fixed: base; linear: base * n; exponential: base * 2**(n-1); exponential_jitter:
    "full jitter" (uniform between 0 and the exponential delay), which spreads a herd
    of retries better than adding a small random term. All capped at max_delay.
    """
    n = max(1, failed_attempt)
    base = max(0.0, policy.base_delay_seconds)
    cap = max(0.0, policy.max_delay_seconds)
    if policy.backoff == Backoff.FIXED:
        delay = base
    elif policy.backoff == Backoff.LINEAR:
        delay = base * n
    elif policy.backoff in (Backoff.EXPONENTIAL, Backoff.EXPONENTIAL_JITTER):
        # min() before the power keeps huge attempt numbers from overflowing.
        delay = base * (2 ** min(n - 1, 62))
    else:
        raise ValueError(f"unknown backoff {policy.backoff!r}")
    delay = min(delay, cap)
    if policy.backoff == Backoff.EXPONENTIAL_JITTER:
        delay = (rng or random).uniform(0.0, delay)
    return delay
