"""The Runs page on the stack `make run` starts, in a browser set to New York time: a run's
times read in that zone with UTC on hover; the search box, switched to the logs, finds the
run by a line it printed and marks the words; axe-core finds nothing serious on the list at
desk and phone widths; no request fails and nothing is logged to the console. The task it
creates is deleted. Screenshots: tests/artifacts/runs-list-*.png."""

from __future__ import annotations

import uuid
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from tests.browser.conftest import screenshot, stack_api, stack_token
from tests.browser.signed_in import SignedIn
from tests.processes import wait_until

pytestmark = pytest.mark.needs_os_tool("chromium")

ZONE = "America/New_York"


class Viewer(SignedIn):
    """The stack's admin signed in, in New York time."""

    def __init__(self, browser, stack, viewport: dict) -> None:
        super().__init__(
            browser, stack, viewport, path="/dashboard/runs", ready="#runs", timezone_id=ZONE
        )


def _finished(stack, token: str, execution_id: str) -> dict:
    run: dict = {}

    def ended() -> bool:
        run.update(stack_api(stack, "GET", f"/api/v1/executions/{execution_id}", token))
        return run["status"] not in ("pending", "queued", "running")

    wait_until(ended, timeout=90, interval=0.5, message="the triggered run to end")
    assert run["status"] == "success", run
    return run


@pytest.mark.timeout(300)
def test_times_in_the_viewers_zone_and_a_log_search_from_the_runs_list(stack, stack_browser):
    token = stack_token(stack)
    word = f"needle{uuid.uuid4().hex[:10]}"
    task = stack_api(
        stack,
        "POST",
        "/api/v1/tasks",
        token,
        {
            "name": f"runs-list-{word}",
            "schedule": {"type": "manual"},
            "handler": {
                "type": "shell",
                "command": ["sh", "-c", f"echo warming up; echo found {word} here"],
            },
        },
    )
    desk = phone = None
    try:
        triggered = stack_api(stack, "POST", f"/api/v1/tasks/{task['id']}/trigger", token, {})
        execution_id = triggered["execution_id"]
        run = _finished(stack, token, execution_id)
        started = datetime.fromisoformat(run["started_at"].replace("Z", "+00:00"))
        local = started.astimezone(ZoneInfo(ZONE))
        expected = f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}"
        utc_title = f"{started.astimezone(ZoneInfo('UTC')):%Y-%m-%d %H:%M:%S} UTC"

        desk = Viewer(stack_browser, stack, {"width": 1280, "height": 800})
        page = desk.page
        page.goto(f"{stack['url']}/dashboard/runs?task={task['id']}&window=1h")
        row = f'#runs tr[data-execution-id="{execution_id}"]'
        page.wait_for_selector(f'{row} td[data-label="started"] time[data-zoned]')
        started_cell = f'{row} td[data-label="started"] time'
        assert page.inner_text(started_cell) == expected
        assert page.get_attribute(started_cell, "title") == utc_title
        assert page.inner_text(f'{row} td[data-label="duration"]').endswith(("ms", "s"))

        # The search box, switched to the logs, across the tenant's runs (no task filter).
        page.goto(f"{stack['url']}/dashboard/runs")
        page.fill("#f-q", word)
        page.select_option("#f-search-in", "logs")
        page.click("#btn-filter")
        page.wait_for_selector(f"{row} td.log-hits mark")
        assert page.inner_text(f"{row} td.log-hits mark") == word
        assert f"found {word} here" in page.inner_text(f"{row} td.log-hits code.log-hit")
        assert page.locator("#runs tbody tr[data-execution-id]").count() == 1
        # A search's answer is a snapshot: the page stops polling (each poll would search again).
        page.wait_for_selector("#live[data-polling=stopped]")
        screenshot(page, "runs-list-log-search")
        assert desk.blocking_axe() == []
        assert desk.failures == [], desk.failures

        phone = Viewer(stack_browser, stack, {"width": 390, "height": 844})
        phone.page.goto(page.url)
        phone.page.wait_for_selector(f"{row} td.log-hits mark")
        screenshot(phone.page, "runs-list-log-search-phone")
        assert phone.blocking_axe() == []
        assert phone.page.evaluate(
            "document.documentElement.scrollWidth <= document.documentElement.clientWidth"
        )
        assert phone.failures == [], phone.failures
    finally:
        for viewer in (desk, phone):
            if viewer is not None:
                viewer.context.close()
        stack_api(stack, "DELETE", f"/api/v1/tasks/{task['id']}", token)
