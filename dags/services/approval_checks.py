"""What an approval node's definition asks of its tenant, checked when the DAG is saved (a 400
naming the field, nothing saved): enough members to reach the quorum, named users who are
members allowed to decide, a timeout inside the tenant's retention window (a wait that
outlives the run history it belongs to would decide a run nobody can see any more)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dags.approval_selectors import approval_eligible_members
from scheduler_app.errors import ValidationFailed
from scheduler_app.models import Tenant


def approval_nodes_check(spec: Mapping[str, Any], *, tenant: Tenant) -> None:
    for index, node in enumerate(spec["tasks"]):
        if node.get("type") != "approval":
            continue
        where = f"tasks[{index}]"
        approval = node["approval"]
        limit = tenant.retention_days * 86400
        if approval["timeout_seconds"] > limit:
            raise ValidationFailed(
                f"{where}.timeout is longer than this tenant's retention window "
                f"({tenant.retention_days} days)",
                field=f"{where}.timeout",
            )
        eligible = approval_eligible_members(
            tenant_id=tenant.id, role=approval["role"], usernames=approval["users"]
        )
        if approval["role"]:
            found = eligible.count()
            if approval["count"] > found:
                raise ValidationFailed(
                    f"{where}.approvers.count ({approval['count']}) is more than the {found} "
                    f"members of this tenant who are {approval['role']} or higher",
                    field=f"{where}.approvers.count",
                )
            continue
        allowed = set(eligible.values_list("user__username", flat=True))
        missing = [name for name in approval["users"] if name not in allowed]
        if missing:
            # A user of another tenant reads as one that does not exist.
            raise ValidationFailed(
                f"{where}.approvers.users: {', '.join(missing)} "
                f"{'is not a member' if len(missing) == 1 else 'are not members'} of this "
                f"tenant who may decide (operator or admin)",
                field=f"{where}.approvers.users",
            )
