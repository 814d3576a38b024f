"""The mergeable latency histogram: 1% relative accuracy, merging equals one big sketch,
and PostgreSQL bins values exactly as Python does."""

from __future__ import annotations

import math
import random

import pytest
from django.db import connection

from data_lifecycle.latency_sketch import (
    RELATIVE_ACCURACY,
    bin_of,
    bin_sql,
    sketch_merge,
    sketch_of,
    sketch_quantile,
)


def nearest_rank(values: list[float], q: float) -> float:
    """The smallest value with at least q * n values at or under it."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered) - 1e-9)) - 1]


@pytest.mark.parametrize("seed", range(5))
def test_quantiles_are_within_one_percent_of_the_exact_order_statistic(seed):
    rng = random.Random(seed)
    values = [rng.lognormvariate(0, 2.5) for _ in range(2000)]  # ~1 ms to ~hours
    values = [v for v in values if v >= 0.001]
    sketch = sketch_of(values)
    for q in (0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0):
        exact = nearest_rank(values, q)
        assert sketch_quantile(sketch, q) == pytest.approx(exact, rel=RELATIVE_ACCURACY)


def test_merged_sketches_are_the_sketch_of_all_values():
    rng = random.Random(7)
    parts = [[rng.expovariate(0.1) for _ in range(300)] for _ in range(24)]
    merged = sketch_merge(sketch_of(part) for part in parts)
    assert merged == sketch_of(v for part in parts for v in part)


def test_zero_and_negative_values_read_back_as_zero_and_empty_is_none():
    sketch = sketch_of([0.0, -0.002, 0.0004, 5.0])
    assert sketch_quantile(sketch, 0.5) == 0.0
    assert sketch_quantile(sketch, 1.0) == pytest.approx(5.0, rel=RELATIVE_ACCURACY)
    assert sketch_quantile({}, 0.5) is None


@pytest.mark.django_db
def test_postgresql_bins_like_python():
    values = [0.0, 0.0009, 0.001, 0.0123, 0.5, 1.0, 1.0202, 2.0, 59.9, 3600.0, 86399.5]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {bin_sql('v')} FROM unnest(%s::float8[]) WITH ORDINALITY AS t(v, i) "
            "ORDER BY i",
            [values],
        )
        from_sql = [row[0] for row in cursor.fetchall()]
    assert from_sql == [bin_of(v) for v in values]
