"""Alert incidents through the API (`GET /incidents`, `POST /incidents/{id}/acknowledge|resolve`),
as functions of a `Client`: what schedctl's `incidents`, `ack` and `resolve` call."""

from __future__ import annotations

from typing import Any

from scheduler_sdk.client import Client

STATES = ("open", "acknowledged", "resolved")


def incidents_list(client: Client, *, state: str | None = None) -> list[dict[str, Any]]:
    """The tenant's incidents, newest first (all states unless `state` is given)."""
    return client._all("incidents", {"state": state} if state else {})


def incident_acknowledge(client: Client, incident_id: str) -> dict[str, Any]:
    return client.request("POST", f"incidents/{incident_id}/acknowledge")


def incident_resolve(client: Client, incident_id: str, *, note: str = "") -> dict[str, Any]:
    return client.request("POST", f"incidents/{incident_id}/resolve", json_body={"note": note})
