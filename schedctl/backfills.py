"""`schedctl backfill`: run a task or DAG for every fire its schedule had in a window, with
what to do about the fires that already have a run (`--reprocess`), or only say what it
would do (`--dry-run`)."""

from __future__ import annotations

import click

from schedctl.cli import State, main, pass_state
from schedctl.ops import kind_option, resolve
from schedctl.output import emit_data, key, output_option, short_time, table

REPROCESS = ("none", "failed", "all")

# The API's outcome of a fire, in words.
OUTCOME_WORDS = {
    "new": "new run",
    "rerun": "run again",
    "skipped_succeeded": "skipped (already succeeded)",
    "skipped_running": "skipped (still running)",
    "skipped_recorded": "skipped (already recorded)",
}


@main.command()
@click.argument("name")
@click.option("--from", "start", required=True, help="ISO-8601 start of the window.")
@click.option("--to", "end", required=True, help="ISO-8601 end of the window.")
@click.option("--max-parallel", type=click.IntRange(1), help="Runs at a time (server default).")
@click.option(
    "--reprocess",
    type=click.Choice(REPROCESS),
    help="Fires that already have a run: none (default: leave them), failed (run again the "
    "failed, timed out or cancelled ones), all (run every ended one again).",
)
@click.option("--dry-run", is_flag=True, help="Create nothing; list each fire and its outcome.")
@kind_option
@output_option
@pass_state
def backfill(
    state: State,
    name: str,
    start: str,
    end: str,
    max_parallel: int | None,
    reprocess: str | None,
    dry_run: bool,
    kind: str | None,
    output: str,
) -> None:
    """Run a task or DAG for every fire its schedule had between --from and --to."""
    client = state.client
    kind, found = resolve(client, name, kind)
    answer = client.backfill(
        kind=kind,
        object_id=found.id,
        start=start,
        end=end,
        max_parallel=max_parallel,
        reprocess=reprocess,
        dry_run=dry_run,
    )
    if output != "table":
        emit_data(answer, output)
        return
    if dry_run:
        click.echo(table(answer.get("fires") or [], FIRE_COLUMNS))
        counts = answer.get("counts") or {}
        said = ", ".join(
            f"{counts[outcome]} {OUTCOME_WORDS[outcome]}"
            for outcome in OUTCOME_WORDS
            if counts.get(outcome)
        )
        click.echo(f"{answer.get('total', 0)} fire times (reprocess {answer['reprocess']}): {said}")
        return
    target = answer.get("target") or {}
    row = {**answer, "target": f"{target.get('type', kind)} {target.get('name', name)}"}
    click.echo(table([row], BACKFILL_COLUMNS))


def _outcome(fire: dict) -> str:
    words = OUTCOME_WORDS.get(fire.get("outcome", ""), fire.get("outcome", ""))
    if fire.get("outcome") == "rerun" and fire.get("was"):
        return f"{words} (was {fire['was']})"
    return words


FIRE_COLUMNS = [
    ("fire time", lambda fire: short_time(fire.get("scheduled_at"))),
    ("outcome", _outcome),
]

BACKFILL_COLUMNS = [
    ("id", key("id")),
    ("target", key("target")),
    ("start", lambda row: short_time(row.get("start"))),
    ("end", lambda row: short_time(row.get("end"))),
    ("status", key("status")),
    ("fires", key("total")),
    ("released", key("released")),
    ("already recorded", key("already_recorded")),
    ("reprocess", key("reprocess")),
    ("run again", key("reprocessed")),
    ("max parallel", key("max_parallel")),
]
