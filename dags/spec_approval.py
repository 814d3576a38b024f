"""An approval node's part of a DAG definition (pure Python, as `dags.spec`):

    {"id": "sign-off", "type": "approval", "depends_on": ["build"],
     "approvers": {"role": "operator", "count": 2},        # or {"users": ["alice", "bob"]}
     "timeout": "24h", "on_timeout": "reject", "message": "Ship the release?"}

The node runs nothing: it waits, holding no worker slot, until `count` distinct approvers
approve (it succeeds), one rejects (it fails, and the DAG's failure policy applies), or the
timeout passes (`on_timeout`: reject, approve or skip). Whether the role has enough members,
whether the named users are members who may decide, and whether the timeout fits the
tenant's retention window are the tenant's facts: `dags.services.approval_checks` checks
them when the DAG is saved.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dags.spec_durations import duration_seconds
from dags.spec_errors import DagSpecError
from dags.spec_keys import NOT_FOR_TYPED_WAITS

APPROVAL_KEYS = {"approvers", "timeout", "on_timeout", "message"}
# A viewer reads and never decides; a role admits every higher role too.
APPROVER_ROLES = ("operator", "admin")
KNOWN_ROLES = ("viewer", *APPROVER_ROLES)
ON_TIMEOUT = ("reject", "approve", "skip")
# Keys of a node that runs something: an approval node has none of them.
NOT_FOR_APPROVALS = NOT_FOR_TYPED_WAITS
MAX_APPROVERS = 100
MAX_USERS = 100
MAX_MESSAGE = 2000
DEFAULT_TIMEOUT_SECONDS = 86400
# The spec's own ceiling; the tenant's retention window is usually the tighter one.
MAX_TIMEOUT_SECONDS = 366 * 86400
USERNAME = re.compile(r"^[\w.@+-]{1,150}$")


def _approvers(raw: Any, *, where: str) -> dict[str, Any]:
    field = f"{where}.approvers"
    if not isinstance(raw, Mapping) or not raw:
        raise DagSpecError(
            f'{field} is required: {{"role": "operator", "count": 1}} or '
            f'{{"users": ["alice"], "count": 1}}',
            field=field,
        )
    unknown = sorted(set(raw) - {"role", "users", "count"})
    if unknown:
        raise DagSpecError(f"{field} has unknown keys: {', '.join(unknown)}", field=field)
    if ("role" in raw) == ("users" in raw):
        raise DagSpecError(f"{field} needs exactly one of role or users", field=field)
    count = raw.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_APPROVERS:
        raise DagSpecError(
            f"{field}.count must be a whole number from 1 to {MAX_APPROVERS}",
            field=f"{field}.count",
        )
    if "role" in raw:
        role = raw["role"]
        if role not in KNOWN_ROLES:
            raise DagSpecError(
                f"{field}.role must be one of {', '.join(APPROVER_ROLES)} (a member role)",
                field=f"{field}.role",
            )
        if role not in APPROVER_ROLES:
            raise DagSpecError(
                f"{field}.role: a {role} may not decide; use {' or '.join(APPROVER_ROLES)}",
                field=f"{field}.role",
            )
        return {"role": role, "users": [], "count": count}
    users = raw["users"]
    if (
        not isinstance(users, list)
        or not users
        or len(users) > MAX_USERS
        or not all(isinstance(user, str) and USERNAME.match(user) for user in users)
    ):
        raise DagSpecError(
            f"{field}.users must be a list of 1 to {MAX_USERS} user names",
            field=f"{field}.users",
        )
    if len(set(users)) != len(users):
        raise DagSpecError(f"{field}.users repeats a user", field=f"{field}.users")
    if count > len(users):
        raise DagSpecError(
            f"{field}.count ({count}) is more than the {len(users)} users named",
            field=f"{field}.count",
        )
    return {"role": None, "users": list(users), "count": count}


def approval_node_parse(raw: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    """The normalized node (without id and depends_on, which `dags.spec` adds)."""
    extra = [key for key in NOT_FOR_APPROVALS if key in raw]
    if extra:
        raise DagSpecError(
            f"{where} is an approval and runs nothing: no {', '.join(extra)}",
            field=f"{where}.{extra[0]}",
        )
    approvers = _approvers(raw.get("approvers"), where=where)
    # Whole seconds: a wait's deadline is shown and compared to the second.
    timeout = round(
        duration_seconds(raw.get("timeout", DEFAULT_TIMEOUT_SECONDS), field=f"{where}.timeout")
    )
    if not 1 <= timeout <= MAX_TIMEOUT_SECONDS:
        raise DagSpecError(
            f"{where}.timeout must be from 1 s to {MAX_TIMEOUT_SECONDS // 86400} days",
            field=f"{where}.timeout",
        )
    on_timeout = raw.get("on_timeout", "reject")
    if on_timeout not in ON_TIMEOUT:
        raise DagSpecError(
            f"{where}.on_timeout must be one of {', '.join(ON_TIMEOUT)}",
            field=f"{where}.on_timeout",
        )
    message = raw.get("message", "")
    if not isinstance(message, str) or len(message) > MAX_MESSAGE:
        raise DagSpecError(
            f"{where}.message must be text of at most {MAX_MESSAGE} characters",
            field=f"{where}.message",
        )
    return {
        "type": "approval",
        "approval": {
            **approvers,
            "timeout_seconds": timeout,
            "on_timeout": on_timeout,
            "message": message,
        },
    }
