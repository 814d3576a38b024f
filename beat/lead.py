"""How far ahead the leader rings a burst: far enough that its last fire is out by its time.

A fire that allows overlap rings `SCHEDULER_FIRE_AHEAD_SECONDS` (0.5 s) before it falls due
(`heap.Entry.ring_ahead`). That is enough for a few thousand fires; a burst of 50,000 takes
the leader seconds to record and ring, and rung only 0.5 s ahead, most of it would go out
late. So before each tick the engine looks at what rings ahead in the next seconds
(`heap.ScheduleHeap.due_ahead_profile`), and at the rate it has been ringing at
(`RingRate`), and rings earlier by as much as the work ahead needs: every bucket of fires must
be rung, with everything due before it, by its ring time, with one tick to spare. The lead is
bounded by `SCHEDULER_FIRE_AHEAD_MAX_SECONDS` (under a claim's clock tolerance: a worker
claims a run at most that early and starts its handler at its time, `workers.due`).

Where the workers are the bottleneck, fair dispatch holds most of an early burst back as
`pending` until its time anyway (measured: `python -m bench burst`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from beat.heap import BUCKET_SECONDS

# Fires a second the leader is assumed to ring before it has measured itself: below what
# one beat rings on 2 vCPUs (bench fire-storm), so a first burst starts early rather than late.
FIRST_RING_RATE = 5000.0
# A tick that fires fewer than this says little about the ring rate.
RATE_SAMPLE_MIN_FIRES = 1000
# The slowest rate believed: a stalled tick must not push every later lead to the maximum.
SLOWEST_RING_RATE = 1000.0


class RingRate:
    """Fires a second this leader records and rings while it is busy (a moving average)."""

    def __init__(self, first: float = FIRST_RING_RATE) -> None:
        self.per_second = first

    def observe(self, fires: int, seconds: float) -> None:
        if fires < RATE_SAMPLE_MIN_FIRES or seconds <= 0:
            return
        sample = max(SLOWEST_RING_RATE, fires / seconds)
        self.per_second = (self.per_second + sample) / 2


def extra_lead(
    profile: list[tuple[datetime, int]],
    *,
    now: datetime,
    rate: float,
    margin_seconds: float,
    most: timedelta,
) -> timedelta:
    """How much earlier than its own lead what rings ahead must ring now (0 to `most`).

    `profile`: (ring time, how many) in ring order, as `due_ahead_profile` gives it;
    `margin_seconds`: the time to spare (a tick: the next look may be that far away)."""
    cumulative = 0
    extra = 0.0
    for ring_at, count in profile:
        cumulative += count
        slack = (ring_at - now).total_seconds()
        if cumulative / rate + margin_seconds >= slack:
            extra = max(extra, slack + BUCKET_SECONDS)
    return min(timedelta(seconds=max(0.0, extra)), most)
