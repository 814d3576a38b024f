"""`schedctl stats NAME`: a task's or a DAG's runs over a window, per hour or day: counts,
success rate, p50/p95/p99 of duration and of schedule-to-start lag (GET .../stats)."""

from __future__ import annotations

from typing import Any

import click

from schedctl.cli import State, main, pass_state
from schedctl.ops import kind_option, resolve
from schedctl.output import emit_data, output_option, short_time, table


def _seconds(value: float | None) -> str | None:
    if value is None:
        return None
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def _rate(value: float | None) -> str | None:
    return None if value is None else f"{value * 100:.1f}%"


def _failed(point: dict[str, Any]) -> int:
    return sum(n for status, n in point["by_status"].items() if status != "success")


COLUMNS = [
    ("start", lambda p: p["label"]),
    ("runs", lambda p: p["count"]),
    ("success", lambda p: _rate(p["success_rate"])),
    ("not success", _failed),
    *(
        (f"{what} {q}", lambda p, what=what, q=q: _seconds(p[what][q]))
        for what in ("duration", "lag")
        for q in ("p50", "p95", "p99")
    ),
]


@main.command()
@click.argument("name")
@kind_option
@click.option("--window", default="7d", show_default=True, help="Back from now: 24h, 7d, 90d.")
@click.option(
    "--bucket",
    type=click.Choice(["hour", "day"]),
    help="One row per hour or day (default: hours up to 2d, days beyond).",
)
@click.option("--all-rows", is_flag=True, help="Also the buckets without runs.")
@output_option
@pass_state
def stats(
    state: State,
    name: str,
    kind: str | None,
    window: str,
    bucket: str | None,
    all_rows: bool,
    output: str,
) -> None:
    """Latency and success of a task or a DAG: one row per bucket, then the window's total
    (its percentiles are those of all its runs, not an average of the rows')."""
    client = state.client
    kind, found = resolve(client, name, kind)
    if kind == "task":
        answer = client.task_stats(found.id, window=window, bucket=bucket)
    else:
        answer = client.dag_stats(found.id, window=window, bucket=bucket)
    if output != "table":
        emit_data(answer, output)
        return
    rows = [
        {**point, "label": short_time(point["start"])}
        for point in answer["series"]
        if all_rows or point["count"]
    ]
    rows.append({**answer["totals"], "label": f"total ({answer['window']})"})
    click.echo(
        f"{kind} {name}: runs scheduled in the last {answer['window']}, by {answer['bucket']}"
    )
    click.echo(table(rows, COLUMNS))
