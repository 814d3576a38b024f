"""The latency trend of the task and DAG pages: a week by the hour from the stats buckets
(`data_lifecycle.selectors.latency`), as the points the page's chart draws (p50 and p95 of
duration and lag per hour) and the week's totals as text."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

TREND_WINDOW = timedelta(days=7)
TREND_BUCKET = "hour"


def seconds_text(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def latency_panel(stats: dict[str, Any]) -> dict[str, Any]:
    """{"points": [{"t", "count", "duration_p50", "duration_p95", "lag_p50", "lag_p95"}],
    "totals": {"count", "success", "duration": "p50 · p95 · p99", "lag": ...}}."""
    points = [
        {
            "t": _iso(point["start"]),
            "count": point["count"],
            **{
                f"{what}_{q}": point[what][q]
                for what in ("duration", "lag")
                for q in ("p50", "p95")
            },
        }
        for point in stats["series"]
    ]
    totals = stats["totals"]
    rate = totals["success_rate"]
    return {
        "points": points,
        "totals": {
            "count": totals["count"],
            "success": "–" if rate is None else f"{rate * 100:.1f}%",
            **{
                what: " · ".join(
                    f"{q} {seconds_text(totals[what][q])}" for q in ("p50", "p95", "p99")
                )
                for what in ("duration", "lag")
            },
        },
    }


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")
