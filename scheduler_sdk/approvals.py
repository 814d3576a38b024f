"""Approvals through the API (`GET /approvals`, `POST /approvals/{id}/approve|reject`), as
functions of a `Client`: what schedctl's `approvals`, `approve` and `reject` call.

A decision is a person's: the API refuses an API key, so these need a user's login
(`schedctl login`)."""

from __future__ import annotations

from typing import Any

from scheduler_sdk.client import Client

VERDICTS = ("approve", "reject")


def approvals_list(client: Client, *, status: str = "waiting") -> list[dict[str, Any]]:
    """The tenant's approvals (by default the pending ones), newest first."""
    return client._all("approvals", {"status": status})


def approval_decide(
    client: Client, approval_id: str, *, verdict: str, comment: str = ""
) -> dict[str, Any]:
    """Approve or reject; the approval as it is after the decision (`released`: whether this
    decision ended the node)."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {', '.join(VERDICTS)}")
    return client.request(
        "POST",
        f"approvals/{approval_id}/{verdict}",
        json_body={"comment": comment, "via": "cli"},
    )
