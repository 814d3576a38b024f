"""What the approval tests share: members of a role, their API clients, a DAG that waits."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from scheduler_app.models import TenantMembership

H = {"type": "python", "callable": "noop"}


def member(tenant, username: str, role: str, *, email: str = ""):
    user = get_user_model().objects.create_user(
        username=username, password="pw-123456", email=email or f"{username}@example.com"
    )
    TenantMembership.objects.create(user=user, tenant=tenant, role=role)
    return user


def client_of(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def release_dag(name: str = "release", **approval: Any) -> dict[str, Any]:
    """sign-off (an approval) -> ship; notify runs whatever sign-off did (all_done)."""
    node = {
        "id": "sign-off",
        "type": "approval",
        "approvers": {"role": "operator", "count": 2},
        "timeout": "24h",
        "on_timeout": "reject",
        "message": "Ship the release?",
        **approval,
    }
    return {
        "dag": name,
        "failure_policy": "skip_downstream",
        "tasks": [
            node,
            {"id": "ship", "handler": H, "depends_on": ["sign-off"]},
            {"id": "notify", "handler": H, "depends_on": ["sign-off"], "trigger_rule": "all_done"},
        ],
    }
