"""What a sleep or sensor node may ask of this tenant, checked when its DAG is saved (400s
naming the field; the pure checks are in `dags.spec_timers`).

- A sleep, or a sensor's timeout, may not outlast the tenant's retention window
  (`Tenant.retention_days`): the run it belongs to would be archived while it waits.
- A sensor's http url or s3 endpoint_url may not be a literal private, loopback or metadata
  address (nor a localhost name) unless the tenant's `webhook_allowed_hosts` lists it: the
  same allow list and the same guard (`handler_contract.ssrf`) as http tasks. Names are
  resolved and checked again at every poke (`dags.sensors`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dags.spec_timers import TIMER_TYPES
from handler_contract.ssrf import url_target_refused
from scheduler_app.errors import ValidationFailed
from scheduler_app.models import Tenant


def timers_check(spec: Mapping[str, Any], *, tenant: Tenant) -> None:
    window = tenant.retention_days * 86400.0
    for index, node in enumerate(spec["tasks"]):
        if node.get("type") not in TIMER_TYPES:
            continue
        where = f"tasks[{index}]"
        if node["type"] == "sleep":
            seconds = node.get("duration")
            field = f"{where}.duration"
        else:
            seconds = node["timeout"]
            field = f"{where}.timeout"
            _target_check(node["sensor"], where=f"{where}.sensor", tenant=tenant)
        if seconds is not None and seconds > window:
            raise ValidationFailed(
                f"{field} is {seconds:g} s, longer than this tenant's retention window "
                f"({tenant.retention_days} days): the run would be archived while it waits",
                field=field,
            )


def _target_check(sensor: Mapping[str, Any], *, where: str, tenant: Tenant) -> None:
    key = {"http": "url", "s3": "endpoint_url"}.get(sensor["kind"])
    if key is None or key not in sensor:
        return
    refused = url_target_refused(sensor[key], tenant.webhook_allowed_hosts)
    if refused:
        raise ValidationFailed(
            f"{where}.{key}: {refused}; the platform operator can allow the host for this "
            "tenant (tenant setting webhook_allowed_hosts)",
            field=f"{where}.{key}",
        )
