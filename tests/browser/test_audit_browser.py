"""The audit log on the stack `make run` starts, in a real browser: the admin pauses a task
from its page with a reason typed next to the button, opens the audit page, filters it by the
verb, finds the entry (in words, the reason, paused false -> true) and follows its link back to
the task. axe-core on the audit page at desktop and phone widths; no failed request and no
console error. Screenshots: tests/artifacts/stack-audit-*.png."""

from __future__ import annotations

import uuid

import pytest

from tests.browser.conftest import screenshot, stack_api, stack_token
from tests.browser.signed_in import DESKTOP, PHONE, SignedIn

pytestmark = pytest.mark.needs_os_tool("chromium")
REASON = "warehouse migration tonight"


class Admin(SignedIn):
    """The stack's admin in a browser context of `viewport`, axe in every page, failures kept."""


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
