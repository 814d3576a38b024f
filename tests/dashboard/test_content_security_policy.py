"""Every page carries the Content-Security-Policy, and no page the product renders needs what it
refuses: no inline <script>, no inline <style>, no on*= handler, nothing from elsewhere. Every
GET route of the dashboard (walked from its URLconf, as an admin), the join page, the admin,
the Swagger UI, error pages, the API. The browser tests (tests/browser/) check what Chromium
itself refused on the pages they drive."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from dashboard.roles import dashboard_routes
from scheduler_app.services.invitations import invitation_create
from tests.api_clients import PASSWORD

pytestmark = pytest.mark.django_db
SKIPPED = {"logout", "join-token"}  # a POST, and a redirect into the join page


class InlineCode(HTMLParser):
    """What a strict policy would refuse in a page: inline scripts, styles and handlers,
    and anything loaded from another origin."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self._in_script_without_src = False

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        for name, _ in attrs:
            if name.startswith("on"):
                self.found.append(f"<{tag} {name}=...>")
        if tag == "style":
            self.found.append("<style>")
        # A data block (json_script's type="application/json") is never run: not code.
        data_block = (attributes.get("type") or "").endswith("json")
        if tag == "script" and not attributes.get("src") and not data_block:
            self._in_script_without_src = True
        for name in ("src", "href"):
            value = attributes.get(name) or ""
            if tag in ("script", "link", "img") and value.startswith(("http:", "https:", "//")):
                self.found.append(f"<{tag} {name}={value}>")
        if (attributes.get("href") or "").startswith("javascript:"):
            self.found.append(f"<{tag} href=javascript:...>")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script_without_src = False

    def handle_data(self, data):
        if self._in_script_without_src and data.strip():
            self.found.append("<script>inline</script>")


def _inline_code(html: str) -> list[str]:
    parser = InlineCode()
    parser.feed(html)
    return parser.found


def _assert_policy(response, where: str) -> None:
    policy = response["Content-Security-Policy"]
    for directive in (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "object-src 'none'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    ):
        assert directive in policy, (where, policy)
    assert "unsafe-eval" not in policy and "script-src 'self' 'unsafe-inline'" not in policy


@pytest.fixture
def admin_browser(tenant_and_user) -> Client:
    _, user = tenant_and_user
    user.is_staff = user.is_superuser = True
    user.save()
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def _path(route, world) -> str:
    path = route.path
    for param in route.params:
        value = (
            world["dead_letter_id"]
            if (param, route.name) == ("execution_id", "dlq-action")
            else world.get(param, "x")
        )
        path = path.replace(f"<str:{param}>", value)
    return path


def test_every_dashboard_page_has_the_policy_and_no_inline_code(admin_browser, world):
    checked = []
    for route in dashboard_routes():
        if route.name in SKIPPED or "action" in route.params:
            continue  # buttons: POST only (tests/dashboard/test_roles_follow_the_api.py)
        if route.rules is not None and "GET" not in route.rules.methods:
            continue
        path = _path(route, world)
        response = admin_browser.get(path)
        assert response.status_code in (200, 404), (path, response.status_code)
        _assert_policy(response, path)
        if response.get("Content-Type", "").startswith("text/html"):
            assert _inline_code(response.content.decode()) == [], path
        checked.append(route.name)
    assert {"overview", "dlq", "dag-run", "members", "channels", "task-edit"} <= set(checked)


def test_the_live_fragments_have_no_inline_code(admin_browser, world):
    for path in (
        "/dashboard/?fragment=1",
        f"/dashboard/tasks/{world['task_id']}?fragment=1",
        f"/dashboard/dags/{world['dag_id']}/runs/{world['run_id']}?fragment=1",
        "/dashboard/dlq?fragment=1",
    ):
        response = admin_browser.get(path)
        assert response.status_code == 200, path
        assert _inline_code(response.content.decode()) == [], path


def test_the_sign_in_join_admin_api_docs_and_error_pages_have_the_policy(admin_browser, tenant):
    anonymous = Client()
    token = invitation_create(tenant=tenant, role="viewer", link_for=str).token
    anonymous.get(f"/dashboard/join/{token}")
    pages = {
        "/dashboard/login/": anonymous,
        "/dashboard/join": anonymous,
        "/admin/login/": anonymous,
        "/admin/": admin_browser,
        "/admin/scheduler_app/taskdefinition/": admin_browser,
        "/admin/auth/user/": admin_browser,
        "/api/docs/": anonymous,
        "/dashboard/no-such-page": admin_browser,
    }
    for path, client in pages.items():
        response = client.get(path)
        assert response.status_code in (200, 404), (path, response.status_code)
        _assert_policy(response, path)
        assert _inline_code(response.content.decode()) == [], path
    # The Swagger UI's start-up script is served as a file, not written into the page.
    script = anonymous.get("/api/docs/?script=")
    assert script.status_code == 200 and script["Content-Type"] == "application/javascript"
    # The API's answers carry it too (a browser opening one renders nothing active).
    _assert_policy(anonymous.get("/api/v1/"), "/api/v1/")
    _assert_policy(anonymous.get("/healthz"), "/healthz")


def test_the_policy_is_the_settings_one(settings, client):
    assert "style-src-attr" in settings.CONTENT_SECURITY_POLICY  # the Gantt's bar positions
    get_user_model()  # the default policy, read at start-up, is the one served
    header = client.get("/healthz")["Content-Security-Policy"]
    assert header.startswith("default-src 'self'; script-src 'self'; style-src 'self'")
