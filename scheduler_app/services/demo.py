"""The demo tenant, user and example tasks that `make run` loads (idempotent)."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from scheduler_app.choices import Role
from scheduler_app.models import TaskDefinition, Tenant
from scheduler_app.services.task_definitions import task_create
from scheduler_app.services.tenants import membership_set, tenant_create

DEMO_TENANT = "demo"
DEMO_USERNAME = "admin"
DEMO_PASSWORD = "admin-demo-password"  # noqa: S105 - printed to the developer on purpose

EXAMPLE_TASKS = [
    {
        "name": "heartbeat-every-30s",
        "description": "A python no-op every 30 seconds: shows the scheduler firing.",
        "schedule": {"type": "interval", "expression": "30s"},
        "handler": {"type": "python", "callable": "echo"},
        "parameters": {"message": "still alive"},
        "tags": ["demo"],
    },
    {
        "name": "disk-usage-every-minute",
        "description": "A shell command (argv, no shell) every minute, result on the last line.",
        "schedule": {"type": "cron", "expression": "* * * * *", "timezone": "UTC"},
        "handler": {
            "type": "shell",
            "command": [
                "python3",
                "-c",
                "import json,shutil; u=shutil.disk_usage('/'); "
                "print(json.dumps({'free_gb': round(u.free/1e9, 1)}))",
            ],
        },
        "timeout_seconds": 30,
        "tags": ["demo", "shell"],
    },
    {
        "name": "flaky-then-succeeds",
        "description": "Fails twice, then succeeds: watch the retries with backoff.",
        "schedule": {"type": "manual"},
        "handler": {"type": "python", "callable": "flaky"},
        "parameters": {"succeed_on_attempt": 3},
        "retry_policy": {"max_attempts": 3, "backoff": "exponential", "base_delay_seconds": 2},
        "tags": ["demo"],
    },
    {
        "name": "always-fails",
        "description": "Fails every attempt and lands in the dead-letter queue.",
        "schedule": {"type": "manual"},
        "handler": {"type": "python", "callable": "fail"},
        "retry_policy": {"max_attempts": 2, "backoff": "fixed", "base_delay_seconds": 3},
        "tags": ["demo"],
    },
    {
        "name": "nightly-report-new-york",
        "description": "02:30 in New York, with the DST rule: see its schedule preview.",
        "schedule": {"type": "cron", "expression": "30 2 * * *", "timezone": "America/New_York"},
        "handler": {"type": "python", "callable": "noop"},
        "tags": ["demo"],
    },
]


def demo_seed() -> tuple[Tenant, str, str]:
    users = get_user_model()
    user = users.objects.filter(username=DEMO_USERNAME).first()
    if user is None:
        user = users.objects.create_superuser(
            username=DEMO_USERNAME, email="admin@example.com", password=DEMO_PASSWORD
        )
    tenant = Tenant.objects.filter(slug=DEMO_TENANT).first() or tenant_create(
        slug=DEMO_TENANT, name="Demo tenant"
    )
    membership_set(tenant=tenant, user=user, role=Role.ADMIN)
    existing = set(
        TaskDefinition.objects.filter(tenant=tenant, deleted_at__isnull=True).values_list(
            "name", flat=True
        )
    )
    for spec in EXAMPLE_TASKS:
        if spec["name"] not in existing:
            task_create(tenant=tenant, spec=spec, created_by=user)
    return tenant, DEMO_USERNAME, DEMO_PASSWORD
