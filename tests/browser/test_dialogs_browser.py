"""The task page's dialogs and the task form on the stack `make run` starts, in a real
browser at desktop (1280x800) and phone (390x844) widths: a task is triggered with parameters
typed in the dialog's generated form (and seen through its JSON view), and the stack's worker
runs it with them; a backfill's dry run lists the fires it would create and creates nothing,
and with the reprocess policy "failed" it says which recorded fire it would run again (a fire
the stack's worker really failed);
the task form swaps its handler fields and template with the type, its schedule fields with
the kind, and previews the next fires as the schedule is typed (a bad cron's message shown).
axe-core on the task page with each dialog open and on the task form, at both widths; no
failed request, no console error. What it creates it deletes."""

from __future__ import annotations

import uuid

import pytest

from tests.browser.conftest import screenshot, stack_api, stack_token, wait_for_js
from tests.browser.test_operator_browser import AXE, BLOCKING
from tests.processes import wait_until

pytestmark = pytest.mark.needs_os_tool("chromium")

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


class Visitor:
    """A signed-in browser context of the stack's admin: console errors, failed requests and
    axe's findings are collected as it goes."""

    def __init__(self, browser, stack, viewport, label):
        self.base, self.label, self.viewport = stack["url"], label, viewport
        self.context = browser.new_context(viewport=viewport)
        self.context.add_init_script(path=str(AXE))
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.axe: dict[str, list] = {}
        self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.page.on("console", self._console)
        self.page.on("requestfailed", self._failed)
        self.page.on("response", self._answered)
        self.page.goto(f"{self.base}/dashboard/")
        self.page.fill("input[name=username]", stack["username"])
        self.page.fill("input[name=password]", stack["password"])
        self.page.click("button[type=submit]")
        self.page.wait_for_selector("#live")

    def _failed(self, request) -> None:
        # Leaving a page cuts its poll and its log stream short (ERR_ABORTED): not a failure.
        if "ERR_ABORTED" not in (request.failure or ""):
            self.problems.append(f"failed: {request.url} ({request.failure})")

    def _answered(self, response) -> None:
        if response.status < 400:
            return
        self.problems.append(f"{response.status} {response.url}")

    def _console(self, message) -> None:
        if message.type != "error":
            return
        where = (message.location or {}).get("url", "")
        self.problems.append(f"console: {message.text} ({where})")

    def go(self, path: str, ready: str) -> None:
        response = self.page.goto(self.base + path)
        assert response is not None and response.status == 200, (path, response)
        self.page.wait_for_selector(ready)

    def check(self, name: str) -> None:
        screenshot(self.page, f"dialogs-{self.label}-{name}")
        found = self.page.evaluate(
            "async () => { const r = await axe.run(document, {resultTypes: ['violations']});"
            " return r.violations.map(v => ({id: v.id, impact: v.impact,"
            " nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))})); }"
        )
        self.axe[name] = [v for v in found if v["impact"] in BLOCKING]
        overflow = self.page.evaluate(
            "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 1, f"{self.label}/{name} scrolls sideways by {overflow}px"

    def toolbar_height(self) -> float:
        return self.page.evaluate(
            "() => document.querySelector('main > .actions').getBoundingClientRect().height"
        )


def _task_page_dialogs(visitor: Visitor, task: dict, *, run: bool) -> None:
    page = visitor.page
    visitor.go(f"/dashboard/tasks/{task['id']}", "#btn-trigger-parameters")
    before = visitor.toolbar_height()
    page.click("#btn-trigger-parameters")
    page.wait_for_selector("#trigger-dialog[open]")
    assert visitor.toolbar_height() == before  # the dialog is over the page, not in the row
    dialog = page.locator("#trigger-dialog")
    assert dialog.locator("[name='param.limit']").input_value() == "10"
    assert dialog.locator("[name='param.limit']").get_attribute("type") == "number"
    assert dialog.locator("[name='param.dry']").get_attribute("type") == "checkbox"
    assert dialog.locator("[name='param.day']").get_attribute("type") == "date"
    visitor.check("task-trigger-dialog")
    if run:
        dialog.locator("[name='param.limit']").fill("42")
        dialog.locator("[name='param.region']").fill("us-east")
        dialog.locator("[name='param.dry']").check()
        # The JSON view shows the same values; an edit there comes back to the fields.
        dialog.locator("input[name=parameters_mode][value=json]").check()
        text = dialog.locator("[name=parameters_json]").input_value()
        assert '"limit": 42' in text and '"region": "us-east"' in text and '"dry": true' in text
        assert dialog.locator("[name='param.limit']").is_hidden()
        dialog.locator("[name=parameters_json]").fill(text.replace('"us-east"', '"us-west"'))
        dialog.locator("input[name=parameters_mode][value=fields]").check()
        assert dialog.locator("[name='param.region']").input_value() == "us-west"
        dialog.locator("#trigger-dialog-submit").click()
        page.wait_for_selector("#result", timeout=90000)
        wait_for_js(page, "document.querySelector('#result').textContent.includes('us-west')")
        result = page.inner_text("#result")
        assert (
            '"limit": 42' in result and '"dry": true' in result and '"day": "2030-01-01"' in result
        )
        assert "with parameters: run" in page.inner_text(".messages")
        visitor.go(f"/dashboard/tasks/{task['id']}", "#btn-backfill")
    else:
        page.click("#trigger-dialog [data-close-dialog]")
        page.wait_for_selector("#trigger-dialog", state="hidden")
    page.click("#btn-backfill")
    page.wait_for_selector("#backfill-dialog[open]")
    assert visitor.toolbar_height() == before
    assert "America/New_York" in page.inner_text("#backfill-dialog")
    page.fill("#backfill-start", "2026-11-10T00:00")
    page.fill("#backfill-end", "2026-11-10T03:00")
    page.click("#btn-backfill-dry-run")
    page.wait_for_selector("#backfill-plan-summary")
    assert "Dry run: 3 fire times" in page.inner_text("#backfill-plan-summary")
    fires = page.locator("#backfill-dialog .plan-fires li").all_inner_texts()
    assert fires[0].startswith("2026-11-10 00:00 EST") and "(2026-11-10 05:00 UTC)" in fires[0]
    assert page.get_attribute("#backfill-plan time", "title") == "2026-11-10 05:00 UTC"
    assert page.locator("#backfill-dialog[open]").count() == 1  # answered in place
    visitor.check("task-backfill-dialog")
    page.click("#backfill-dialog [data-close-dialog]")


def _failed_fire(stack, token: str, name: str) -> dict:
    """A task whose 01:00 EST fire of 2026-11-10 the stack's worker ran and failed (a
    one-fire backfill of it, its one attempt)."""
    task = stack_api(
        stack,
        "POST",
        "/api/v1/tasks",
        token,
        {
            "name": name,
            "enabled": False,
            "schedule": {"type": "cron", "expression": "0 * * * *", "timezone": "America/New_York"},
            "handler": {"type": "python", "callable": "fail"},
            "retry_policy": {"max_attempts": 1},
        },
    )
    one = {"start": "2026-11-10T06:00:00Z", "end": "2026-11-10T07:00:00Z"}
    backfill = stack_api(stack, "POST", f"/api/v1/tasks/{task['id']}/backfill", token, one)
    wait_until(
        lambda: (
            stack_api(stack, "GET", f"/api/v1/backfills/{backfill['id']}", token)["runs"]["failed"]
            == 1
        ),
        timeout=60,
        message="the stack's worker to fail the backfilled fire",
    )
    return task


def _reprocess_dry_run(visitor: Visitor, failing: dict) -> None:
    """The dialog's policy "failed": the dry run says the failed fire would run again."""
    page = visitor.page
    visitor.go(f"/dashboard/tasks/{failing['id']}", "#btn-backfill")
    page.click("#btn-backfill")
    page.wait_for_selector("#backfill-dialog[open]")
    page.fill("#backfill-start", "2026-11-10T00:00")
    page.fill("#backfill-end", "2026-11-10T03:00")
    page.check("#backfill-dialog input[name=reprocess][value=failed]")
    page.click("#btn-backfill-dry-run")
    page.wait_for_selector("#backfill-plan-counts")
    outcomes = page.locator("#backfill-dialog .plan-fires .fire-outcome").all_inner_texts()
    assert outcomes == ["new run", "run again (was failed)", "new run"], outcomes
    assert "2 new run, 1 run again" in page.inner_text("#backfill-plan-counts")
    assert page.locator("#backfill-dialog input[value=failed]").is_checked()  # kept
    visitor.check("task-backfill-reprocess")
    page.click("#backfill-dialog [data-close-dialog]")


def _navigating_select(visitor: Visitor) -> None:
    """Choosing a window loads nothing (WCAG 3.2.2); Enter or the button does."""
    page = visitor.page
    visitor.go("/dashboard/missed?hours=1", "#missed-hours")
    page.select_option("#missed-hours", "24")
    page.wait_for_load_state("networkidle")
    assert page.url.endswith("/dashboard/missed?hours=1")
    page.focus("#missed-hours")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "hours=24" in page.url
    page.select_option("#missed-hours", "6")
    with page.expect_navigation():
        page.click("#btn-missed-window")
    assert "hours=6" in page.url


def _task_form(visitor: Visitor) -> None:
    page = visitor.page
    visitor.go("/dashboard/tasks/new", "#task-form")
    assert page.locator("#handler-shell").is_visible()
    assert page.locator("#handler-http").is_hidden()
    assert page.locator("#field-handler_config").is_hidden()  # fields, not JSON, by default
    assert page.locator("#field-run_at").is_hidden()  # a cron has no "Run at"
    assert page.locator("#field-schedule_expression label").inner_text() == "Cron expression"
    page.fill("#id_schedule_expression", "*/15 * * * *")
    wait_for_js(page, "document.querySelectorAll('#schedule-preview-fires li').length === 5")
    first = page.locator("#schedule-preview-fires time").first
    assert first.get_attribute("title").endswith(" UTC")
    visitor.check("task-form")

    page.select_option("#id_handler_type", "http")
    assert page.locator("#handler-http").is_visible() and page.locator("#handler-shell").is_hidden()
    assert page.input_value("#id_h_http_url") == "https://example.com/hook"
    page.check("input[name=handler_mode][value=json]")
    config = page.input_value("#id_handler_config")
    assert '"url": "https://example.com/hook"' in config and "echo" not in config

    page.select_option("#id_schedule_type", "once")
    assert page.locator("#field-run_at").is_visible()
    assert page.locator("#field-schedule_expression").is_hidden()
    page.fill("#id_timezone", "Europe/Paris")
    page.fill("#id_run_at", "2031-01-01T09:00:00")
    wait_for_js(
        page,
        "document.querySelectorAll('#schedule-preview-fires li').length === 1 &&"
        " document.querySelector('#schedule-preview-fires time').dateTime"
        " === '2031-01-01T08:00:00Z'",
    )
    page.select_option("#id_schedule_type", "interval")
    assert page.locator("#field-schedule_expression label").inner_text() == "Interval"
    page.select_option("#id_schedule_type", "cron")
    page.fill("#id_schedule_expression", "61 * * * *")
    wait_for_js(
        page, "document.querySelector('#schedule-preview').dataset.previewState === 'error'"
    )
    assert "minute" in page.inner_text("#schedule-preview-state")
    assert page.locator("#schedule-preview-fires li").count() == 0


@pytest.mark.timeout(600)
def test_dialogs_and_the_task_form_in_a_browser(stack, stack_browser):
    token = stack_token(stack)
    name = f"dialogs-{uuid.uuid4().hex[:8]}"
    task = stack_api(
        stack,
        "POST",
        "/api/v1/tasks",
        token,
        {
            "name": name,
            "enabled": False,  # no fire of its own while the test runs: only what it triggers
            "schedule": {"type": "cron", "expression": "0 * * * *", "timezone": "America/New_York"},
            "handler": {"type": "python", "callable": "echo"},
            "parameters": {"limit": 10, "region": "eu", "dry": False, "day": "2030-01-01"},
        },
    )
    visitors: list[Visitor] = []
    failing = None
    try:
        failing = _failed_fire(stack, token, f"{name}-fails")
        desk = Visitor(stack_browser, stack, DESKTOP, "desktop")
        visitors.append(desk)
        _task_page_dialogs(desk, task, run=True)
        _reprocess_dry_run(desk, failing)
        _task_form(desk)
        _navigating_select(desk)
        phone = Visitor(stack_browser, stack, PHONE, "phone")
        visitors.append(phone)
        _task_page_dialogs(phone, task, run=False)
        phone.go("/dashboard/tasks/new", "#task-form")
        phone.check("task-form")
        backfills = stack_api(stack, "GET", f"/api/v1/backfills?task={task['id']}", token)
        assert backfills["count"] == 0  # the dry runs created nothing
        theirs = stack_api(stack, "GET", f"/api/v1/backfills?task={failing['id']}", token)
        assert theirs["count"] == 1  # only the one that made the failed fire
        for visitor in visitors:
            assert visitor.problems == [], visitor.problems
            assert {k: v for k, v in visitor.axe.items() if v} == {}, visitor.axe
    finally:
        for visitor in visitors:
            visitor.context.close()
        stack_api(stack, "DELETE", f"/api/v1/tasks/{task['id']}", token)
        if failing is not None:
            stack_api(stack, "DELETE", f"/api/v1/tasks/{failing['id']}", token)
