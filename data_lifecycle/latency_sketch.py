"""Mergeable latency histograms: logarithmic buckets with 1% relative accuracy (DDSketch).

A percentile cannot be averaged across hours, but a histogram can be added: each stats
bucket keeps the counts of its durations (and lags) per logarithmic bin, and the p50/p95/p99
of any window are read from the sum of its buckets' bins.

A value `v` (seconds) falls in bin `i = ceil(log_gamma(v))`, gamma = (1 + a) / (1 - a), and
reads back as `2 * gamma**i / (gamma + 1)`: within `a` = 1% of every value of the bin.
Values under `MIN_SECONDS` (and negative lags: clocks one millisecond apart) count in the
zero bin, read back as 0. The sketch is `{"<bin>": count}` (JSON object keys are text), the
zero bin under the key `ZERO`.

Pure Python, no Django: the refresh (SQL, `bin_sql`) and every reader share it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

RELATIVE_ACCURACY = 0.01
GAMMA = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
LOG_GAMMA = math.log(GAMMA)
MIN_SECONDS = 0.001
ZERO = "z"
QUANTILES = (0.5, 0.95, 0.99)

Sketch = dict[str, int]


def bin_sql(seconds_expression: str) -> str:
    """The SQL text of the bin key of a seconds expression (NULL stays NULL)."""
    return (
        f"CASE WHEN ({seconds_expression}) < {MIN_SECONDS} THEN '{ZERO}' "
        f"ELSE ceil(ln(({seconds_expression})::float8) / {LOG_GAMMA!r})::int::text END"
    )


def bin_of(seconds: float) -> str:
    """The bin key of one value (what `bin_sql` computes in PostgreSQL)."""
    if seconds < MIN_SECONDS:
        return ZERO
    return str(math.ceil(math.log(seconds) / LOG_GAMMA))


def sketch_of(values: Iterable[float]) -> Sketch:
    sketch: Sketch = {}
    for value in values:
        key = bin_of(value)
        sketch[key] = sketch.get(key, 0) + 1
    return sketch


def sketch_merge(sketches: Iterable[Mapping[str, int] | None]) -> Sketch:
    merged: Sketch = {}
    for sketch in sketches:
        for key, count in (sketch or {}).items():
            merged[key] = merged.get(key, 0) + int(count)
    return merged


def _bin_value(key: str) -> float:
    if key == ZERO:
        return 0.0
    return 2 * GAMMA ** int(key) / (GAMMA + 1)


def _ordered(sketch: Mapping[str, int]) -> list[tuple[str, int]]:
    return sorted(
        ((key, count) for key, count in sketch.items() if count),
        key=lambda item: -math.inf if item[0] == ZERO else int(item[0]),
    )


def sketch_quantile(sketch: Mapping[str, int] | None, q: float) -> float | None:
    """The nearest-rank `q` quantile (the smallest value with at least `q * n` values at or
    under it), within 1%; None when the sketch is empty."""
    ordered = _ordered(sketch or {})
    total = sum(count for _, count in ordered)
    if not total:
        return None
    rank = max(1, math.ceil(q * total - 1e-9))
    seen = 0
    for key, count in ordered:
        seen += count
        if seen >= rank:
            return _bin_value(key)
    return _bin_value(ordered[-1][0])


def sketch_quantiles(sketch: Mapping[str, int] | None) -> dict[str, float | None]:
    """{"p50": s, "p95": s, "p99": s} (None each when the sketch is empty)."""
    return {f"p{int(q * 100)}": sketch_quantile(sketch, q) for q in QUANTILES}


def sketch_count(sketch: Mapping[str, int] | None) -> int:
    return sum(int(count) for count in (sketch or {}).values())
