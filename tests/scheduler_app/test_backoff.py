import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler_app.services.backoff import RetryPolicy, retry_delay_seconds


def policy(backoff: str, base: float = 10, cap: float = 3600) -> RetryPolicy:
    return RetryPolicy(
        max_attempts=10, backoff=backoff, base_delay_seconds=base, max_delay_seconds=cap
    )


def test_fixed_backoff_waits_the_base_every_time():
    assert [retry_delay_seconds(policy("fixed"), failed_attempt=n) for n in (1, 2, 5)] == [
        10,
        10,
        10,
    ]


def test_linear_backoff_grows_by_the_base():
    assert [retry_delay_seconds(policy("linear"), failed_attempt=n) for n in (1, 2, 3)] == [
        10,
        20,
        30,
    ]


def test_exponential_backoff_doubles():
    delays = [retry_delay_seconds(policy("exponential"), failed_attempt=n) for n in (1, 2, 3, 4)]
    assert delays == [10, 20, 40, 80]


def test_exponential_backoff_is_capped_by_max_delay():
    assert retry_delay_seconds(policy("exponential", cap=100), failed_attempt=10) == 100


def test_huge_attempt_numbers_do_not_overflow():
    assert retry_delay_seconds(policy("exponential", cap=60), failed_attempt=10_000) == 60


def test_exponential_jitter_stays_within_zero_and_the_exponential_delay():
    rng = random.Random(7)
    delays = [
        retry_delay_seconds(policy("exponential_jitter"), failed_attempt=3, rng=rng)
        for _ in range(500)
    ]
    assert all(0 <= delay <= 40 for delay in delays)
    assert len({round(delay, 3) for delay in delays}) > 400  # actually spread out
    assert 15 < sum(delays) / len(delays) < 25  # uniform: mean near half of 40


def test_unknown_backoff_is_refused():
    with pytest.raises(ValueError):
        retry_delay_seconds(policy("quadratic"), failed_attempt=1)


@given(
    backoff=st.sampled_from(["fixed", "linear", "exponential", "exponential_jitter"]),
    base=st.floats(min_value=0, max_value=1e6),
    cap=st.floats(min_value=0, max_value=1e6),
    attempt=st.integers(min_value=1, max_value=10_000),
)
def test_every_delay_is_between_zero_and_the_cap(backoff, base, cap, attempt):
    delay = retry_delay_seconds(policy(backoff, base, cap), failed_attempt=attempt)
    assert 0 <= delay <= cap
