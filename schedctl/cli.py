"""`schedctl`: the scheduler from a terminal, through the REST API only.

Exit codes scripts can test: 0 done, 1 the command failed (the API refused, the server is
unreachable, a run followed with `logs -f` did not succeed), 2 wrong usage (Click's own).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click
import requests

from schedctl.output import emit_data, output_option, plan_text
from scheduler_sdk.client import Client
from scheduler_sdk.credentials import Credentials, CredentialStore
from scheduler_sdk.errors import ApiError, SchedulerError
from scheduler_sdk.files import load_definitions
from scheduler_sdk.plan import plan_apply, plan_execute

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Schedctl(click.Group):
    """Turns the SDK's errors into one line on stderr and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ApiError as error:
            code = f" [{error.code}]" if error.code else ""
            click.echo(f"error: {error}{code}", err=True)
            for field, messages in error.errors.items():
                if field != error.field or len(messages) > 1 or len(error.errors) > 1:
                    click.echo(f"  {field}: {'; '.join(messages)}", err=True)
            sys.exit(1)
        except SchedulerError as error:
            click.echo(f"error: {error}", err=True)
            sys.exit(1)
        except requests.ConnectionError as error:
            click.echo(f"error: cannot reach the server: {error}", err=True)
            sys.exit(1)
        except requests.Timeout:
            click.echo("error: the server did not answer in time", err=True)
            sys.exit(1)


class State:
    def __init__(self, url: str | None, tenant: str | None) -> None:
        self.url = url
        self.tenant = tenant
        self.store = CredentialStore()
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client.from_environment(
                url=self.url, tenant=self.tenant, store=self.store
            )
        return self._client


pass_state = click.make_pass_decorator(State)


@click.group(cls=Schedctl, context_settings=CONTEXT)
@click.option("--url", envvar="SCHEDCTL_URL", help="The server (default: the one logged in to).")
@click.option(
    "--tenant", envvar="SCHEDCTL_TENANT", help="Act for this tenant (users in several tenants)."
)
@click.version_option("0.1.0", prog_name="schedctl")
@click.pass_context
def main(ctx: click.Context, url: str | None, tenant: str | None) -> None:
    """Define, ship and watch scheduler tasks and DAGs through the REST API.

    Log in once (`schedctl login --url URL --username NAME`), or set SCHEDCTL_API_KEY and
    SCHEDCTL_URL; then `apply -f`, `get`, `trigger`, `logs -f`. Every command has --help.
    """
    ctx.obj = State(url, tenant)


@main.command()
@click.option("--url", envvar="SCHEDCTL_URL", required=True, help="The server's base URL.")
@click.option("--username", "-u", help="Prompted when not given (not needed with an API key).")
@click.option("--tenant", help="The tenant to act for, when the user is in several.")
@pass_state
def login(state: State, url: str, username: str | None, tenant: str | None) -> None:
    """Log in and keep the token in the user's config dir (mode 0600).

    The password is read from SCHEDCTL_PASSWORD or prompted. With SCHEDCTL_API_KEY set, the
    key is checked and only the URL is kept (the key stays in the environment).
    """
    tenant = tenant or state.tenant
    if os.environ.get("SCHEDCTL_API_KEY"):
        client = Client(url, api_key=os.environ["SCHEDCTL_API_KEY"], tenant=tenant)
        client.request("GET", "tasks", params={"page_size": 1})
        state.store.save(Credentials(url=client.url, tenant=tenant))
        click.echo(f"API key accepted by {client.url}")
        return
    username = username or click.prompt("Username")
    password = os.environ.get("SCHEDCTL_PASSWORD") or click.prompt("Password", hide_input=True)
    client = Client.login(
        url, username=username, password=password, tenant=tenant, store=state.store
    )
    where = f" (tenant {tenant})" if tenant else ""
    click.echo(f"Logged in to {client.url} as {username}{where}")


@main.command()
@pass_state
def logout(state: State) -> None:
    """Forget the stored token."""
    removed = state.store.clear()
    click.echo("Logged out" if removed else "Not logged in")


@main.command()
@click.option(
    "-f",
    "--filename",
    "paths",
    multiple=True,
    required=True,
    type=click.Path(exists=True),
    help="A YAML/JSON file or a directory of them (repeatable).",
)
@click.option("--dry-run", is_flag=True, help="Show what would change; change nothing.")
@click.option("--prune", is_flag=True, help="Also delete what the files no longer name.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask before pruning.")
@output_option
@pass_state
def apply(
    state: State, paths: tuple[str, ...], dry_run: bool, prune: bool, yes: bool, output: str
) -> None:
    """Create or update tasks and DAGs from files, matched by name, showing what changes.

    A task's file is the body of POST /api/v1/tasks; keys it leaves out keep their server
    values. A DAG's file is its whole definition (the shape of dags/definitions/); a change
    makes a new version. --prune soft-deletes the tasks and the API-made DAGs of the tenant
    that no file names (after a confirmation, or --yes).
    """
    definitions = [item for path in paths for item in load_definitions(path)]
    client = state.client
    plan = plan_apply(client, definitions, prune=prune)
    scripted = output != "table"
    if dry_run or not plan.pending:
        if scripted:
            emit_data({"applied": False, "changes": [c.as_dict() for c in plan.changes]}, output)
        else:
            for line in plan_text(plan, done=False, details=True):
                click.echo(line)
        return
    deletes = [c for c in plan.changes if c.action == "delete"]
    if deletes and not yes:
        if scripted or not sys.stdin.isatty():
            raise click.UsageError("--prune would delete objects: confirm with --yes")
        for line in plan_text(plan, done=False, details=True):
            click.echo(line)
        names = ", ".join(f"{c.kind} {c.name}" for c in deletes)
        click.confirm(f"Delete {names}?", abort=True)

    def done(change: Any) -> None:
        if not scripted:
            click.echo(f"{change.action:>9}  {change.kind} {change.name}", err=True)

    # Progress on a terminal only: a script reads the summary (or -o json) at the end.
    progress = done if len(plan.pending) > 1 and sys.stderr.isatty() else None
    plan_execute(client, plan, progress=progress)
    if scripted:
        emit_data({"applied": True, "changes": [c.as_dict() for c in plan.changes]}, output)
    else:
        for line in plan_text(plan, done=True, details=True):
            click.echo(line)


from schedctl import approvals, backfills, incidents, ops, stats  # noqa: E402,F401  (registers the other commands on `main`)
