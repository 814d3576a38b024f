"""A task's (or DAG's) `owner`: who the runbook tells when it pauses it. `user:<username>` is a
member of the tenant (mailed at the address of their account), any other text one of the
tenant's notification targets (`alerting.services.targets`: a channel name or a URI).

Both are checked when the definition is saved (a 400 naming `owner`), against the saving
tenant only: a user or a channel of another tenant reads exactly as one that does not exist,
so naming them tells an attacker nothing and reaches nobody."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from alerting.models import ChannelKind
from alerting.services.delivery import Target
from alerting.services.targets import targets_for
from scheduler_app.errors import ValidationFailed
from scheduler_app.models import TenantMembership

USER_PREFIX = "user:"


def _member_email(*, tenant_id: Any, username: str) -> str | None:
    """The member's address; None when no member of the tenant has that name."""
    membership = (
        TenantMembership.platform.select_related("user")
        .filter(tenant_id=tenant_id, user__username=username)
        .first()
    )
    return None if membership is None else (membership.user.email or "")


def owner_check(*, tenant_id: Any, owner: str) -> None:
    """Raise ValidationFailed (field `owner`) unless `owner` names someone of the tenant."""
    if not owner:
        return
    if owner.startswith(USER_PREFIX):
        username = owner[len(USER_PREFIX) :].strip()
        if not username or _member_email(tenant_id=tenant_id, username=username) is None:
            raise ValidationFailed(
                f"owner {owner!r}: no member of this tenant has the user name {username!r}",
                field="owner",
            )
        return
    targets, problems = targets_for(tenant_id=tenant_id, texts=[owner])
    if problems or not targets:
        why = problems[0] if problems else f"{owner!r} names no receiver"
        raise ValidationFailed(
            f"owner: {why}; use user:<username> or a notification target of this tenant",
            field="owner",
        )


def task_owner_check(*, tenant_id: Any, fields: Mapping[str, Any]) -> None:
    """The check alerting adds to saving a task or a DAG (scheduler_app.task_checks)."""
    if fields.get("owner"):
        owner_check(tenant_id=tenant_id, owner=fields["owner"])


def owner_targets(*, tenant_id: Any, owner: str) -> tuple[list[Target], list[str]]:
    """(receivers, problems) of `owner` now: a member who left, or a channel deleted since the
    definition was saved, is a problem reported, not an error."""
    if not owner:
        return [], []
    if owner.startswith(USER_PREFIX):
        username = owner[len(USER_PREFIX) :].strip()
        email = _member_email(tenant_id=tenant_id, username=username)
        if email is None:
            return [], [f"owner {owner!r} is no longer a member of the tenant"]
        if not email:
            return [], [f"owner {owner!r} has no email address"]
        return [Target(ChannelKind.EMAIL, email, tenant_id=str(tenant_id))], []
    return targets_for(tenant_id=tenant_id, texts=[owner])
