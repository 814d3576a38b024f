"""The audit log on the stack `make run` starts, in a real browser: the admin pauses a task
from its page with a reason typed next to the button, opens the audit page, filters it by the
verb, finds the entry (in words, the reason, paused false -> true) and follows its link back to
the task. axe-core on the audit page at desktop and phone widths; no failed request and no
console error. Screenshots: tests/artifacts/stack-audit-*.png."""

from __future__ import annotations

import uuid

import pytest

from tests.browser.conftest import screenshot, stack_api, stack_token
from tests.browser.test_operator_browser import AXE, BLOCKING, PHONE

pytestmark = pytest.mark.needs_os_tool("chromium")
DESKTOP = {"width": 1280, "height": 800}
REASON = "warehouse migration tonight"


class Admin:
    """The stack's admin in a browser context of `viewport`, axe in every page, failures kept."""

    def __init__(self, browser, stack, viewport):
        self.base = stack["url"]
        self.context = browser.new_context(viewport=viewport)
        self.context.add_init_script(path=str(AXE))
        self.page = self.context.new_page()
        self.failures: list[str] = []
        self.page.on(
            "response",
            lambda r: self.failures.append(f"{r.status} {r.url}") if r.status >= 400 else None,
        )
        self.page.on(
            "requestfailed",
            lambda r: (
                None
                if "ERR_ABORTED" in (r.failure or "")
                else self.failures.append(f"failed {r.url}: {r.failure}")
            ),
        )
        self.page.on(
            "console",
            lambda m: self.failures.append(f"console: {m.text}") if m.type == "error" else None,
        )
        self.page.on("pageerror", lambda e: self.failures.append(f"page error: {e}"))
        self.page.goto(f"{self.base}/dashboard/")
        self.page.fill("input[name=username]", stack["username"])
        self.page.fill("input[name=password]", stack["password"])
        self.page.click("button[type=submit]")
        self.page.wait_for_selector("#live")

    def blocking_axe(self) -> list[dict]:
        found = self.page.evaluate(
            "async () => { const r = await axe.run(document, {resultTypes: ['violations']});"
            " return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,"
            " nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))})); }"
        )
        return [v for v in found if v["impact"] in BLOCKING]

    def fits_the_width(self) -> bool:
        return self.page.evaluate(
            "() => document.documentElement.scrollWidth <= window.innerWidth + 1"
        )


@pytest.mark.timeout(600)
def test_a_pause_with_a_reason_is_found_on_the_audit_page(stack, stack_browser):
    token = stack_token(stack)
    name = f"audited-{uuid.uuid4().hex[:6]}"
    task = stack_api(
        stack,
        "POST",
        "/api/v1/tasks",
        token,
        {
            "name": name,
            "schedule": {"type": "interval", "expression": "1h"},
            "handler": {"type": "python", "callable": "noop"},
        },
    )
    desk = phone = None
    try:
        desk = Admin(stack_browser, stack, DESKTOP)
        page = desk.page
        page.goto(f"{desk.base}/dashboard/tasks/{task['id']}")
        page.fill("#pause-note-input", REASON)
        page.click("#btn-pause")
        page.wait_for_selector("#pause-record")
        assert REASON in page.inner_text("#pause-record")

        page.click("header nav >> text=Audit log")
        page.wait_for_selector("#audit-filters")
        page.fill("#audit-verb", "task.pause")
        page.fill("#audit-object-id", task["id"])
        page.click("#btn-audit-filter")
        page.wait_for_selector('#audit-entries tr[data-verb="task.pause"]')
        rows = page.locator("#audit-entries tbody tr")
        assert rows.count() == 1  # filtered: this task's pause, nothing else of the stack's
        row = rows.first
        assert "paused task" in row.locator(".audit-words").inner_text()
        assert row.locator(".audit-reason").inner_text() == REASON
        assert "paused: false → true" in row.locator("td[data-label=change]").inner_text()
        assert stack["username"] in row.locator("td[data-label=who]").inner_text()
        screenshot(page, "stack-audit-desktop")
        assert desk.blocking_axe() == [], "axe on the audit page (desktop)"
        assert desk.fits_the_width()

        phone = Admin(stack_browser, stack, PHONE)
        phone.page.goto(f"{phone.base}/dashboard/audit?verb=task.pause&object_id={task['id']}")
        phone.page.wait_for_selector('#audit-entries tr[data-verb="task.pause"]')
        screenshot(phone.page, "stack-audit-phone")
        assert phone.blocking_axe() == [], "axe on the audit page (phone)"
        assert phone.fits_the_width(), "the audit page scrolls sideways at 390 px"

        # The entry links to the task it names.
        row.locator("a.audit-object").click()
        page.wait_for_url(f"**/dashboard/tasks/{task['id']}")
        assert desk.failures == [] and phone.failures == [], (desk.failures, phone.failures)
    finally:
        for admin in (desk, phone):
            if admin is not None:
                admin.context.close()
        # The stack is shared: leave no task behind.
        stack_api(stack, "DELETE", f"/api/v1/tasks/{task['id']}", token)
