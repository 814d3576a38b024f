"""schedctl's approval commands: `approvals` (what waits for a decision), `approve` and
`reject` (with a comment), through the API as a signed-in user."""

from __future__ import annotations

import click

from schedctl.cli import State, main, pass_state
from schedctl.output import emit, emit_data, key, output_option, short_time
from scheduler_sdk.approvals import approval_decide, approvals_list

COLUMNS = [
    ("id", key("id")),
    ("dag", key("dag")),
    ("node", key("node_id")),
    ("run", lambda row: row["dag_run_id"][:8]),
    ("approvals", lambda row: f"{row['approvals']}/{row['approvers']['count']}"),
    ("status", key("status")),
    ("deadline", lambda row: short_time(row["deadline"])),
    ("message", lambda row: (row["message"] or "")[:40]),
]


@main.command()
@click.option(
    "--status",
    type=click.Choice(["waiting", "approved", "rejected", "skipped", "cancelled"]),
    default="waiting",
    show_default=True,
)
@output_option
@pass_state
def approvals(state: State, status: str, output: str) -> None:
    """The tenant's approvals (by default those waiting for a decision)."""
    emit(approvals_list(state.client, status=status), COLUMNS, output)


def _decide(state: State, approval_id: str, verdict: str, comment: str, output: str) -> None:
    decided = approval_decide(state.client, approval_id, verdict=verdict, comment=comment)
    if output != "table":
        emit_data(decided, output)
        return
    done = "approved" if verdict == "approve" else "rejected"
    outcome = (
        f"; the node is released ({decided['status']})"
        if decided["released"]
        else f"; {decided['approvals']} of {decided['approvers']['count']} approvals"
    )
    click.echo(f"{done} {decided['node_id']} of {decided['dag']} (approval {approval_id}){outcome}")


@main.command()
@click.argument("approval_id")
@click.option("--comment", "-m", default="", help="Why (kept with the decision and audited).")
@output_option
@pass_state
def approve(state: State, approval_id: str, comment: str, output: str) -> None:
    """Approve an approval node of a DAG run (its id: `schedctl approvals`)."""
    _decide(state, approval_id, "approve", comment, output)


@main.command()
@click.argument("approval_id")
@click.option(
    "--comment", "--reason", "-m", "comment", required=True, help="Why (the node's error, audited)."
)
@output_option
@pass_state
def reject(state: State, approval_id: str, comment: str, output: str) -> None:
    """Reject an approval node of a DAG run: the node fails with the comment as its error."""
    _decide(state, approval_id, "reject", comment, output)
