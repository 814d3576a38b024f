"""Every dashboard route, walked from the URLconf as a viewer and as an operator: each page or
button is allowed or refused exactly as the API's rule for the endpoint it stands for says
(api/permissions.py), and a refused one changes nothing, in PostgreSQL or in
Redis. The bug it pins: an operator's POST dlq/<id>/delete un-dead-lettered a run, where the
API's DELETE admin/dlq/<id> is for admins (403 for an operator).

A route added later is walked too: one that takes a POST without naming its API rule fails
here, unless it is one of the sign-in routes listed below.
"""

from __future__ import annotations

import re

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.test import Client

from api.permissions import role_allows
from dashboard.roles import DashboardRoute, dashboard_routes
from scheduler_app.redis_client import get_redis, redis_key
from scheduler_app.services.tenants import membership_set
from tests.api_clients import PASSWORD

pytestmark = pytest.mark.django_db
ROLES = ("viewer", "operator")
# Routes that are not a tenant member's writes: signing in and out, joining by invitation
# (public: the token is the credential; tests/scheduler_app/test_members.py plays them), and
# an approval's signed link (the token and the sign-in of the approver it names;
# tests/dags/test_approval_links.py plays it).
SIGN_IN_ROUTES = {"login", "logout", "join-token", "join", "approval-link"}
SNAPSHOT_APPS = ("scheduler_app", "dags", "alerting", "data_lifecycle", "auth")


def _client(tenant, role: str) -> Client:
    user = get_user_model().objects.create_user(username=f"as-{role}", password=PASSWORD)
    membership_set(tenant=tenant, user=user, role=role)
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def _path(route: DashboardRoute, ids: dict[str, str], action: str | None = None) -> str:
    path = route.path
    for param in route.params:
        if param == "action":
            value = action or "no-such-action"
        elif param == "execution_id" and route.name == "dlq-action":
            value = ids["dead_letter_id"]
        else:
            value = ids[param]
        path = path.replace(f"<str:{param}>", value)
    assert "<" not in path, f"{route.path}: a parameter the walk has no object for"
    return path


def _snapshot(ours: set[str]) -> dict[str, object]:
    """Every row of the product's tables and of the users, and the scheduler's Redis keys
    (`ours`: the ids of this test's tenant and objects, see `_changes_by_itself`). The rows
    are read in one statement (each table's rows as JSON, every column): the walk takes
    hundreds of snapshots, and a query per table made them most of the test's time."""
    rows: dict[str, object] = {}
    tables: dict[str, str] = {}  # table -> the label of its (first, concrete) model
    for label in SNAPSHOT_APPS:
        for model in apps.get_app_config(label).get_models():
            if not model._meta.proxy:
                tables.setdefault(model._meta.db_table, model._meta.label)
    sql = " UNION ALL ".join(
        f"SELECT %s::text, to_jsonb(t)::text FROM {connection.ops.quote_name(table)} t"
        for table in tables
    )
    found: dict[str, list[str]] = {label: [] for label in tables.values()}
    with connection.cursor() as cursor:
        cursor.execute(sql, list(tables.values()))
        for label, row in cursor.fetchall():
            found[label].append(row)
    rows.update((label, sorted(values)) for label, values in found.items())
    client = get_redis()
    rows["redis"] = sorted(
        (key, client.type(key))
        for key in client.scan_iter(match=redis_key("*"))
        if not _changes_by_itself(client, key, ours)
    )
    return rows


# Keys that processes other tests of this xdist process started (and that may still be
# stopping) keep writing under its prefix: a beat's lock and marks, the retry budget's
# buckets, fair dispatch's counters, the fleet's heartbeats and the run metrics' hashes. A
# request that rang a run would also write rows, which the database half of the snapshot
# catches.
BOOKKEEPING_BY_OTHER_PROCESSES = (":scheduler:", ":budget:", ":fair:", ":fleet:", ":metrics:")
# Counters of requests, which a refused request is as much as an allowed one: the rate limit's
# per-minute bucket (a new minute's key appears with whichever request comes first in it).
REQUEST_COUNTERS = (":ratelimit:",)


UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _changes_by_itself(client, key: str, ours: set[str]) -> bool:
    """Keys that change with no request, or with any request: the bookkeeping and the request
    counters above, any key naming another
    test's tenant or objects (their cancel marks, usage counters and log byte counts, which
    their stopping workers may still write or which expire while the walk runs), and any
    key with a time to live that names no object at all. Any key naming this test's tenant
    or objects counts, with a time to live or without."""
    if any(part in key for part in (*BOOKKEEPING_BY_OTHER_PROCESSES, *REQUEST_COUNTERS)):
        return True
    if any(value in key for value in ours):
        return False
    if UUID.search(key):
        return True
    return client.ttl(key) != -1


def _requests(route: DashboardRoute):
    """(what, HTTP method, action, the API role it needs) for each rule of the route."""
    rules = route.rules
    if rules.actions:
        for action, rule in rules.actions.items():
            yield action, "POST", action, rule.role
    else:
        for method, rule in rules.methods.items():
            yield method, method, None, rule.role


def _send(client: Client, method: str, path: str):
    return client.generic(method, path) if method != "GET" else client.get(path)


def test_every_dashboard_route_follows_the_apis_role_rules(tenant, world):
    routes = dashboard_routes()
    assert {"dlq-action", "task-action", "dag-run-action", "channel-action"} <= {
        route.name for route in routes
    }
    clients = {role: _client(tenant, role) for role in ROLES}
    ours = {str(tenant.id), *(str(value) for value in world.values())}
    checked: list[str] = []
    for route in routes:
        if route.name in SIGN_IN_ROUTES:
            continue
        if route.rules is None:
            # A page that only shows: it takes no POST, for anyone.
            for role, client in clients.items():
                before = _snapshot(ours)
                response = client.post(_path(route, world))
                assert response.status_code == 405, (route.path, role, response.status_code)
                assert _snapshot(ours) == before, f"{route.path}: a refused POST changed something"
            continue
        for what, method, action, needed in _requests(route):
            path = _path(route, world, action)
            for role, client in clients.items():
                allowed = role_allows(role, needed)
                before = _snapshot(ours)
                if allowed:
                    # Allowed: done for real, then undone, so the next request finds the world.
                    with transaction.atomic():
                        response = _send(client, method, path)
                        transaction.set_rollback(True)
                    assert response.status_code not in (403, 404, 405, 500), (
                        route.name,
                        what,
                        role,
                        response.status_code,
                    )
                else:
                    response = _send(client, method, path)
                    assert response.status_code == 403, (route.name, what, role)
                    assert _snapshot(ours) == before, f"{route.name} {what}: refused, but changed"
                checked.append(f"{route.name}.{what}:{role}={'allowed' if allowed else 'refused'}")
        if route.rules.actions:
            for client in clients.values():  # an action it does not name: nothing
                before = _snapshot(ours)
                assert client.post(_path(route, world)).status_code in (403, 404)
                assert _snapshot(ours) == before
    # The bug: an operator may retry a dead letter but not dismiss it (the API's DELETE).
    assert "dlq-action.retry:operator=allowed" in checked
    assert "dlq-action.delete:operator=refused" in checked
    assert "dlq-action.delete:viewer=refused" in checked
    assert "members.POST:operator=refused" in checked  # inviting is the API's admin write
    assert "invitation-revoke.POST:operator=refused" in checked


def test_an_operator_cannot_dismiss_a_dead_letter(tenant, world):
    """The review's attack, as it was played: the POST answered 302 and the run left the
    dead-letter queue. Now it is the API's answer, a 403, and the run stays."""
    from scheduler_app.models import TaskExecution

    operator = _client(tenant, "operator")
    response = operator.post(f"/dashboard/dlq/{world['dead_letter_id']}/delete")
    assert response.status_code == 403
    assert TaskExecution.platform.get(id=world["dead_letter_id"]).dead_lettered
    # Nor is the button shown to them; the retry one is.
    page = operator.get("/dashboard/dlq").content.decode()
    assert "dlq-retry" in page and "dlq-delete" not in page


def test_the_buttons_shown_follow_the_same_rules(tenant, world):
    viewer, operator = _client(tenant, "viewer"), _client(tenant, "operator")
    task_page = f"/dashboard/tasks/{world['task_id']}"
    assert "btn-trigger" not in viewer.get(task_page).content.decode()
    shown = operator.get(task_page).content.decode()
    assert "btn-trigger" in shown and "btn-edit" not in shown  # edit is PUT /tasks: admins
    assert "Channels</a>" not in operator.get("/dashboard/").content.decode()
