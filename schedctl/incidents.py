"""schedctl's incident commands: `incidents` (what fired, in words), `ack` and `resolve`."""

from __future__ import annotations

import click

from schedctl.cli import State, main, pass_state
from schedctl.output import emit, emit_data, key, output_option, short_time
from scheduler_sdk.incidents import STATES, incident_acknowledge, incident_resolve, incidents_list

COLUMNS = [
    ("id", key("id")),
    ("alert", key("title")),
    ("concerns", lambda row: row["concerns"]["name"]),
    ("since", lambda row: short_time(row["opened_at"])),
    ("state", key("state")),
    ("summary", lambda row: (row["summary"] or "")[:60]),
]


@main.command()
@click.option("--state", "wanted", type=click.Choice(STATES), default=None, help="Only these.")
@output_option
@pass_state
def incidents(state: State, wanted: str | None, output: str) -> None:
    """The tenant's alert incidents, newest first."""
    emit(incidents_list(state.client, state=wanted), COLUMNS, output)


def _said(row: dict, output: str, verb: str) -> None:
    if output != "table":
        emit_data(row, output)
        return
    by = row["acknowledged_by"] if verb == "acknowledged" else row["resolved_by"]
    click.echo(f"{verb} {row['title']}: {row['concerns']['name']} (incident {row['id']}, by {by})")


@main.command()
@click.argument("incident_id")
@output_option
@pass_state
def ack(state: State, incident_id: str, output: str) -> None:
    """Acknowledge an incident: no more announcements; it stays listed until resolved."""
    _said(incident_acknowledge(state.client, incident_id), output, "acknowledged")


@main.command()
@click.argument("incident_id")
@click.option("--note", "-m", default="", help="Why it is over (kept and audited).")
@output_option
@pass_state
def resolve(state: State, incident_id: str, note: str, output: str) -> None:
    """Resolve an incident (if its rule fires again, a new one opens)."""
    _said(incident_resolve(state.client, incident_id, note=note), output, "resolved")
