"""How far ahead a burst rings (beat.lead): enough, at the measured ring rate,
for its last fire to be out by its time; no earlier than the base lead for a small one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from beat.lead import FIRST_RING_RATE, RingRate, extra_lead

NOW = datetime(2027, 1, 1, tzinfo=UTC)
MOST = timedelta(seconds=4.5)


def _at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def test_a_small_burst_needs_no_extra_lead():
    profile = [(_at(2.0), 500)]  # 0.05 s of ringing at 10,000/s, 2 s away
    assert extra_lead(profile, now=NOW, rate=10_000, margin_seconds=0.5, most=MOST) == timedelta(0)


def test_a_burst_that_takes_longer_to_ring_than_it_is_away_rings_now():
    # 30,000 fires ring 2 s from now; at 10,000/s they take 3 s: ringing starts now and
    # takes in everything up to that bucket.
    profile = [(_at(2.0), 30_000)]
    extra = extra_lead(profile, now=NOW, rate=10_000, margin_seconds=0.5, most=MOST)
    assert extra == timedelta(seconds=2.1)


def test_the_fires_before_a_bucket_count_towards_its_lead():
    # Each bucket alone is quick to ring; together, the last one must start now.
    profile = [(_at(0.5), 10_000), (_at(1.0), 10_000), (_at(1.5), 10_000)]
    extra = extra_lead(profile, now=NOW, rate=20_000, margin_seconds=0.0, most=MOST)
    assert extra == timedelta(seconds=1.6)


def test_the_lead_is_bounded():
    profile = [(_at(4.45), 1_000_000)]  # needs 4.55 s
    assert extra_lead(profile, now=NOW, rate=10_000, margin_seconds=0.5, most=MOST) == MOST


def test_the_ring_rate_learns_from_busy_ticks_only():
    rate = RingRate()
    rate.observe(10, 0.001)  # too few fires to say anything
    assert rate.per_second == FIRST_RING_RATE
    rate.observe(15_000, 1.0)
    assert rate.per_second == (FIRST_RING_RATE + 15_000) / 2
    rate.observe(5_000, 60.0)  # a stalled tick is believed no slower than 1,000/s
    assert rate.per_second == ((FIRST_RING_RATE + 15_000) / 2 + 1_000) / 2
