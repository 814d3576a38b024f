"""Every dashboard write is in the audit log, once, in words: the walk posts to every route
of the dashboard's URLconf (read from the resolver, so a route added later is walked too) as
the tenant's admin, each request done for real and then rolled back, and for each request
that changed anything asserts exactly one new entry, with a verb (not a route name), the
object, the actor and the tenant; a request that changed nothing left none."""

from __future__ import annotations

import json

import pytest
from django.apps import apps
from django.db import transaction

from dashboard.roles import dashboard_routes
from scheduler_app.audit_verbs import KNOWN_VERBS, verb_of
from scheduler_app.models import AuditEntry
from tests.dashboard.conftest import PIPELINE
from tests.dashboard.test_dag_edit import GOOD
from tests.dashboard.test_roles_follow_the_api import SIGN_IN_ROUTES, _path, _requests
from tests.dashboard.test_task_form import form_data

pytestmark = pytest.mark.django_db
SNAPSHOT_APPS = ("scheduler_app", "dags", "alerting", "data_lifecycle")
UNCHANGING = {"scheduler_app.AuditEntry"}

# What a person types into the page's form, per route (the buttons post only a reason).
FORMS = {
    "task-new": lambda world: form_data(
        None, name="walked", schedule_type="manual", command="true"
    ),
    "task-edit": lambda world: {**form_data(world["task"]), "description": "walked"},
    "dag-new": lambda world: {"definition": GOOD},
    "dag-edit": lambda world: {"definition": json.dumps({**PIPELINE, "description": "walked"})},
    "channels": lambda world: {"name": "walked", "kind": "webhook", "url": "https://x.example"},
    "members": lambda world: {"role": "viewer"},
}
# Actions whose effect is outside the database (a message sent): audited all the same.
ACTS_OUTSIDE = {"channel-action.test"}
# The verbs the walk must have seen (so it cannot pass by changing nothing).
EXPECTED = {
    "task.create",
    "task.update",
    "task.trigger",
    "task.pause",
    "task.resume",
    "execution.cancel",
    "dlq.retry",
    "dlq.delete",
    "dag.create",
    "dag.update",
    "dag.trigger",
    "dag.pause",
    "dag.resume",
    "dag_run.cancel",
    "channel.create",
    "channel.test",
    "channel.delete",
    "backfill.cancel",
    "invitation.create",
    "invitation.revoke",
}


def _rows() -> dict[str, list[str]]:
    rows = {}
    for label in SNAPSHOT_APPS:
        for model in apps.get_app_config(label).get_models():
            if model._meta.label not in UNCHANGING:
                rows[model._meta.label] = sorted(
                    repr(sorted(r.items())) for r in model._base_manager.values()
                )
    return rows


def test_every_dashboard_write_leaves_one_entry_in_words(signed_in, tenant, world):
    from scheduler_app.models import TaskDefinition

    world = {**world, "task": TaskDefinition.platform.get(id=world["task_id"])}
    seen: dict[str, str] = {}
    walked = 0
    for route in dashboard_routes():
        if route.name in SIGN_IN_ROUTES or route.rules is None:
            continue
        for what, method, action, _ in _requests(route):
            if method != "POST":
                continue
            walked += 1
            path = _path(route, world, action)
            data = FORMS[route.name](world) if route.name in FORMS else {"note": "walked here"}
            with transaction.atomic():
                before, last = (
                    _rows(),
                    AuditEntry.platform.order_by("-id").values_list("id", flat=True).first() or 0,
                )
                response = signed_in.post(path, data)
                after = _rows()
                new = list(AuditEntry.platform.filter(id__gt=last))
                transaction.set_rollback(True)
            assert response.status_code < 500, (route.name, what, response.status_code)
            changed = [label for label in after if after[label] != before[label]]
            if not changed and f"{route.name}.{what}" not in ACTS_OUTSIDE:
                assert new == [], f"{route.name} {what}: nothing changed, yet audited {new}"
                continue
            assert len(new) == 1, f"{route.name} {what} changed {changed}: entries {new}"
            entry = new[0]
            assert verb_of(entry.action) == entry.action and "." in entry.action, entry.action
            noun, _, operation = entry.action.partition(".")
            assert "-" not in noun and operation not in ("post", "put", "patch"), entry.action
            assert entry.object_type and entry.object_id, (route.name, what, entry)
            assert entry.actor == "user:acme-admin" and entry.tenant_id == tenant.id
            assert entry.detail.get("via") == "dashboard"
            if data.get("note") and entry.action.endswith((".pause", ".cancel", ".delete")):
                assert entry.detail.get("reason") == "walked here", (route.name, entry.detail)
            seen[entry.action] = f"{route.name}.{what}"
    assert walked >= 20
    assert set(seen) >= EXPECTED, f"not walked: {sorted(EXPECTED - set(seen))}"
    # Each is among the audit page's verb suggestions (a new verb is named there too).
    assert set(seen) <= set(KNOWN_VERBS), sorted(set(seen) - set(KNOWN_VERBS))
