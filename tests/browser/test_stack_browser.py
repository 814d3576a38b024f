"""The stack a newcomer runs, in a real browser: `make run` on its embedded defaults (embedded
PostgreSQL and redis, free ports, its var dir in a temporary folder), started once for the
tests of this package that drive it (tests/browser/conftest.py). On every dashboard page, the
admin's task list and change form and /api/docs/ the browser must see no failed request (no
response >= 400, no request that failed) and no console error (a Content-Security-Policy
violation is one); the stylesheet applies, charts draw, and a DAG run's graph carries its
labels and state colours. Screenshots: tests/artifacts/stack-*.png.
"""

from __future__ import annotations

import pytest

from tests.browser.conftest import screenshot, stack_api, stack_token, wait_for_js

pytestmark = pytest.mark.needs_os_tool("chromium")

GREEN = "rgb(76, 175, 80)"
# success, running, failed, skipped/upstream failed, waiting/queued (dashboard app.css)
STATE_FILLS = {
    GREEN,
    "rgb(255, 212, 59)",
    "rgb(201, 42, 42)",
    "rgb(195, 200, 206)",
    "rgb(255, 255, 255)",
}
DASHBOARD_BACKGROUND = "rgb(245, 246, 248)"  # app.css, body


class Watched:
    """A page whose failed requests and console errors are recorded."""

    def __init__(self, browser):
        self.context = browser.new_context(viewport={"width": 1366, "height": 860})
        self.page = self.context.new_page()
        self.failures: list[str] = []
        self.page.on(
            "response",
            lambda r: self.failures.append(f"{r.status} {r.url}") if r.status >= 400 else None,
        )
        self.page.on(
            "requestfailed",
            lambda r: (
                # A live-log stream, a poll or a stream the browser itself cancels by leaving
                # the page is not a failure; anything else (refused, reset, timed out) is.
                None
                if "ERR_ABORTED" in (r.failure or "") or "log-events" in r.url
                else self.failures.append(f"failed {r.url}: {r.failure}")
            ),
        )
        self.page.on(
            "console",
            lambda m: self.failures.append(f"console: {m.text}") if m.type == "error" else None,
        )
        self.page.on("pageerror", lambda e: self.failures.append(f"page error: {e}"))

    def visit(self, url: str, name: str, ready: str) -> None:
        response = self.page.goto(url)
        assert response is not None and response.status == 200, url
        # Every page carries the policy; what it refused shows as a console error (above).
        assert "script-src 'self'" in response.headers["content-security-policy"], url
        self.page.wait_for_selector(ready, timeout=30000)
        self.page.wait_for_load_state("networkidle")
        screenshot(self.page, f"stack-{name}")
        assert self.failures == [], f"{name}: {self.failures}"

    def style(self, selector: str, prop: str) -> str:
        return self.page.eval_on_selector(
            selector, f"e => getComputedStyle(e).getPropertyValue('{prop}')"
        )


# The first test also waits for the stack to start (migrations, demo, a DAG run on its worker).
@pytest.mark.timeout(900)
def test_the_stack_make_run_starts_serves_styled_working_pages(stack, stack_browser):
    base = stack["url"]
    watched = Watched(stack_browser)
    page = watched.page
    try:
        page.goto(f"{base}/dashboard/")
        page.fill("input[name=username]", stack["username"])
        page.fill("input[name=password]", stack["password"])
        page.click("button[type=submit]")
        page.wait_for_selector("#live")

        watched.visit(f"{base}/dashboard/", "overview", "#live")
        # The stylesheet applied (hashed name, served by WhiteNoise), and the script ran.
        assert watched.style("body", "background-color") == DASHBOARD_BACKGROUND
        assert "/static/dashboard/app." in page.content()
        assert page.locator(".chart svg").count() > 0

        task_link = page.locator("a[href^='/dashboard/tasks/']:not([href$='/new'])").first
        task_url = base + task_link.get_attribute("href")
        watched.visit(task_url, "task", "#next-fires")
        assert page.locator("#next-fires li").count() >= 1
        assert page.locator(".chart svg").count() > 0

        watched.visit(f"{task_url}/edit", "task-edit", "#task-form")
        for path, name, ready in (
            ("/dashboard/tasks/new", "task-new", "#task-form"),
            ("/dashboard/workers", "workers", "#live"),
            ("/dashboard/missed?hours=1", "missed", "#live"),
            ("/dashboard/dlq", "dlq", "#live"),
            ("/dashboard/members", "members", "#invite"),
            ("/dashboard/dags", "dags", "#dags"),  # last: the DAG link below is on it
        ):
            watched.visit(base + path, name, ready)
            assert watched.style("body", "background-color") == DASHBOARD_BACKGROUND

        # A DAG run, executed by the stack's own worker: labelled nodes turn green.
        dag_link = page.locator("#dags a[href^='/dashboard/dags/']").first
        watched.visit(base + dag_link.get_attribute("href"), "dag", "#btn-dag-trigger")
        page.click("#btn-dag-trigger")
        page.wait_for_selector("#dag-graph")
        # The stack's worker runs the roots: the graph follows live until one is green.
        wait_for_js(
            page,
            "[...document.querySelectorAll('#dag-graph g.dag-node')].some("
            f"g => getComputedStyle(g.querySelector('rect.node-box')).fill === '{GREEN}')",
            timeout=120000,
        )
        fills = page.evaluate(
            "() => [...document.querySelectorAll('#dag-graph rect.node-box')]"
            ".map(r => getComputedStyle(r).fill)"
        )
        assert set(fills) <= STATE_FILLS, fills
        nodes = page.evaluate(
            "() => [...document.querySelectorAll('#dag-graph g.dag-node')].map(g => "
            "[g.dataset.nodeId, g.querySelector('text') && g.querySelector('text').textContent])"
        )
        assert nodes and all(label and node_id in label for node_id, label in nodes), nodes
        watched.visit(page.url, "dag-run", "#dag-graph")
        # A node that ran links to its execution's page.
        execution = page.evaluate(
            "() => [...document.querySelectorAll('#dag-graph g.dag-node a')]"
            ".map(a => a.getAttribute('href')).find(h => h && h.includes('/executions/'))"
        )
        assert execution, "no node links to an execution"
        watched.visit(base + execution, "execution", "#live")

        # The admin: styled (its own CSS through WhiteNoise), the task list and a change form.
        watched.visit(f"{base}/admin/scheduler_app/taskdefinition/", "admin-tasks", "#result_list")
        assert watched.style("#header", "background-color") not in ("", "rgba(0, 0, 0, 0)")
        change = page.locator("#result_list tbody tr th a").first.get_attribute("href")
        watched.visit(base + change, "admin-task-change", "form#taskdefinition_form")

        # The API docs: Swagger UI's assets load and it renders the operations.
        watched.visit(f"{base}/api/docs/", "api-docs", ".swagger-ui .opblock")
        assert watched.style(".swagger-ui .opblock-summary-method", "background-color") not in (
            "",
            "rgba(0, 0, 0, 0)",
        )
    finally:
        watched.context.close()


@pytest.mark.timeout(600)
def test_the_execution_page_follows_a_runs_live_log_on_the_asgi_server(stack, stack_browser):
    """A run on the stack's own worker prints a line a second: the page shows each line
    while the run goes (Server-Sent Events through the ASGI server), then the stored log."""
    token = stack_token(stack)
    task = stack_api(
        stack,
        "POST",
        "/api/v1/tasks",
        token,
        {
            "name": "chatty-live-log",
            "schedule": {"type": "manual"},
            "handler": {
                "type": "shell",
                "command": ["sh", "-c", "for i in 1 2 3 4 5 6 7 8; do echo line-$i; sleep 1; done"],
            },
        },
    )
    execution = stack_api(stack, "POST", f"/api/v1/tasks/{task['id']}/trigger", token, {})
    watched = Watched(stack_browser)
    page = watched.page
    try:
        page.goto(f"{stack['url']}/dashboard/executions/{execution['execution_id']}")
        page.fill("input[name=username]", stack["username"])
        page.fill("input[name=password]", stack["password"])
        page.click("button[type=submit]")
        page.wait_for_selector("#live")
        # Live: a line shows while the run is still going (the stored log has them all).
        page.wait_for_selector("#log[data-log-mode=live]", timeout=60000)
        wait_for_js(
            page, "document.querySelector('#log').textContent.includes('line-2')", timeout=60000
        )
        assert page.get_attribute("#log", "data-log-mode") == "live"
        assert "line-8" not in page.inner_text("#log")
        screenshot(page, "stack-execution-live-log")
        page.wait_for_selector("#log[data-log-mode=stored]", timeout=60000)
        text = page.inner_text("#log")
        assert "line-1" in text and "line-8" in text
        assert "success" in page.inner_text("#log-state")
        assert watched.failures == [], watched.failures
    finally:
        watched.context.close()


@pytest.mark.timeout(300)
def test_an_invitee_joins_with_the_link_and_a_password_of_their_own(stack, stack_browser):
    """The admin takes an invitation link on the Members page; a browser with no account
    opens it, chooses a user name and password, and is signed in to the tenant. The policy
    refuses nothing on the way; the link works once."""
    admin = Watched(stack_browser)
    invitee = Watched(stack_browser)
    late = Watched(stack_browser)
    try:
        page = admin.page
        page.goto(f"{stack['url']}/dashboard/members")
        page.fill("input[name=username]", stack["username"])
        page.fill("input[name=password]", stack["password"])
        page.click("button[type=submit]")
        page.wait_for_selector("#invite")
        page.select_option("#invite select[name=role]", "operator")
        page.click("#btn-invite")
        link = page.wait_for_selector("#invitation-url").get_attribute("value")
        assert "/dashboard/join/inv_" in link
        assert admin.failures == [], admin.failures

        joining = invitee.page
        joining.goto(link)
        joining.wait_for_selector("#join-new-account")
        assert "/dashboard/join/" not in joining.url  # the token left the address bar
        assert "operator" in joining.inner_text("#join-offer")
        joining.fill("input[name=username]", "new-operator")
        joining.fill("input[name=password]", "Chosen-by-me-2026")
        joining.fill("input[name=password_again]", "Chosen-by-me-2026")
        joining.click("#btn-join")
        joining.wait_for_selector("#live")
        assert "joined" in joining.inner_text("[role=status]")
        screenshot(joining, "stack-joined")
        assert invitee.failures == [], invitee.failures

        late.page.goto(link)
        late.page.wait_for_selector("#join-problem")
        assert "already used" in late.page.inner_text("#join-problem")
        token = stack_api(
            stack,
            "POST",
            "/api/v1/auth/token",
            body={"username": "new-operator", "password": "Chosen-by-me-2026"},
        )
        assert token["access"]
    finally:
        for watched in (admin, invitee, late):
            watched.context.close()
