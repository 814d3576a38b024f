"""Incidents on the stack `make run` starts, in a real browser: a task that always fails (with
a failure notification) opens its `task_failing` incident through the rule's own service on
the stack's worker; the operator sees it on the overview, in the nav's badge and on the
Incidents page, acknowledges it there, and the page passes axe-core at desktop and phone
widths with no failed request and no console error. Screenshots:
tests/artifacts/stack-incidents-*.png."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser.conftest import screenshot, stack_api, stack_token, wait_for_js
from tests.processes import wait_until

pytestmark = pytest.mark.needs_os_tool("chromium")

AXE = Path(__file__).resolve().parent / "vendor" / "axe-4.10.3.min.js"
BLOCKING = ("serious", "critical")
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def _axe(page) -> list[dict]:
    found = page.evaluate(
        "async () => { const r = await axe.run(document, {resultTypes: ['violations']});"
        " return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,"
        " nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))})); }"
    )
    return [v for v in found if v["impact"] in BLOCKING]


def _context(stack_browser, stack, viewport, problems: list[str]):
    context = stack_browser.new_context(viewport=viewport)
    context.add_init_script(path=str(AXE))  # before the page's scripts: the CSP refuses a tag
    page = context.new_page()
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on(
        "console",
        lambda message: (
            problems.append(f"console: {message.text}") if message.type == "error" else None
        ),
    )
    # Leaving a page cuts its live fragment's poll short (ERR_ABORTED): not a failure, as in
    # the other stack walks (tests/browser/signed_in.py); any other failed request is.
    page.on(
        "requestfailed",
        lambda request: (
            None
            if "ERR_ABORTED" in (request.failure or "")
            else problems.append(f"failed: {request.url} ({request.failure})")
        ),
    )
    page.on(
        "response",
        lambda response: (
            problems.append(f"{response.status}: {response.url}")
            if response.status >= 400
            else None
        ),
    )
    page.goto(f"{stack['url']}/dashboard/")
    page.fill("input[name=username]", stack["username"])
    page.fill("input[name=password]", stack["password"])
    page.click("button[type=submit]")
    page.wait_for_selector("#live")
    return context, page


def _no_sideways_scroll(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")


@pytest.mark.timeout(300)
def test_an_incident_is_seen_on_the_overview_and_acknowledged_on_its_page(stack, stack_browser):
    token = stack_token(stack)
    # A failure notification opens the task's incident; its receiver never answers (.invalid).
    channel = stack_api(
        stack,
        "POST",
        "/api/v1/channels",
        token,
        {
            "name": "browser-incidents",
            "kind": "webhook",
            "url": "https://hooks.example.invalid/incidents",
            "alerts": False,
        },
    )
    try:
        _walk(stack, stack_browser, token)
    finally:
        stack_api(stack, "DELETE", f"/api/v1/channels/{channel['id']}", token)


def _walk(stack, stack_browser, token: str) -> None:
    task = stack_api(
        stack,
        "POST",
        "/api/v1/tasks",
        token,
        {
            "name": "browser-always-fails",
            "schedule": {"type": "manual"},
            "handler": {"type": "python", "callable": "fail"},
            "retry_policy": {"max_attempts": 1},
            "notifications": {"on_failure": ["browser-incidents"]},
        },
    )

    def ours(state: str) -> dict | None:
        listed = stack_api(stack, "GET", f"/api/v1/incidents?state={state}", token)["results"]
        return next((i for i in listed if i["concerns"]["id"] == task["id"]), None)

    problems: list[str] = []
    incident = None
    try:
        stack_api(stack, "POST", f"/api/v1/tasks/{task['id']}/trigger", token, {})
        incident = wait_until(lambda: ours("open"), timeout=60, message="the task's incident")
        row = f'tr[data-incident-id="{incident["id"]}"]'
        context, page = _context(stack_browser, stack, DESKTOP, problems)
        try:
            # The overview shows it (its live part refreshes every second on the stack).
            page.wait_for_selector(f"#overview-incidents {row}", timeout=30000)
            text = page.inner_text(f"#overview-incidents {row}")
            assert "Task failing" in text and "browser-always-fails" in text
            assert "Runbook" in text
            assert page.get_attribute(
                f"#overview-incidents {row} a[href*='/dashboard/tasks/']", "href"
            ) == (f"/dashboard/tasks/{task['id']}")
            assert int(page.inner_text("#open-incidents-badge").split()[0]) >= 1
            page.wait_for_load_state("networkidle")
            assert _axe(page) == [], "axe on the overview at 1280x800"
            screenshot(page, "stack-incidents-overview")

            page.click("#nav-incidents")
            page.wait_for_selector(f"#active-incidents {row}")
            page.wait_for_load_state("networkidle")
            assert _axe(page) == [], "axe at 1280x800"
            screenshot(page, "stack-incidents-open")
            page.click(f"#active-incidents {row} button.incident-ack")
            page.wait_for_selector(f"#active-incidents {row}[data-state=acknowledged]")
            assert "Acknowledged: Task failing" in page.inner_text("[role=status]")
            assert "acknowledged by" in page.inner_text(f"#active-incidents {row}")
            # Acknowledged: no Acknowledge button any more, Resolve stays.
            assert page.query_selector(f"#active-incidents {row} button.incident-ack") is None
            assert page.query_selector(f"#active-incidents {row} button.incident-resolve")
            screenshot(page, "stack-incidents-acknowledged")
        finally:
            context.close()
        assert ours("acknowledged") is not None

        context, page = _context(stack_browser, stack, PHONE, problems)
        try:
            page.goto(f"{stack['url']}/dashboard/incidents")
            page.wait_for_selector(f"#active-incidents {row}")
            page.wait_for_load_state("networkidle")
            wait_for_js(page, "document.readyState === 'complete'")
            assert _axe(page) == [], "axe at 390x844"
            assert _no_sideways_scroll(page)
            screenshot(page, "stack-incidents-phone")
        finally:
            context.close()
        assert problems == []
    finally:
        # The stack is shared: leave no open incident and no failing task behind.
        if incident is not None:
            for state in ("open", "acknowledged"):
                if ours(state):
                    stack_api(
                        stack, "POST", f"/api/v1/incidents/{incident['id']}/resolve", token, {}
                    )
        stack_api(stack, "DELETE", f"/api/v1/tasks/{task['id']}", token)
