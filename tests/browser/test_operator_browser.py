"""An operator's day on the stack `make run` starts (`manage.py runstack`, the same fixture as
test_stack_browser): finding runs, triggering by keyboard alone, following a message's link,
a DAG's node executions named by their run, live refreshes that keep focus and pause while a
form is in use, the pages at 390x844 (no sideways scrolling, a usable Gantt), and axe-core on
every page with no serious or critical violation.

axe-core (4.10.3, from the npm registry, MPL-2.0) is vendored in tests/browser/vendor and
injected with Playwright's add_init_script (the page's CSP refuses added script tags): nothing
is fetched. Screenshots go to
tests/artifacts/operator-*.png; every page's axe result to tests/artifacts/axe-results.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.browser.conftest import ARTIFACTS, screenshot, stack_api, stack_token, wait_for_js

pytestmark = pytest.mark.needs_os_tool("chromium")

AXE = Path(__file__).resolve().parent / "vendor" / "axe-4.10.3.min.js"
BLOCKING = ("serious", "critical")
PHONE = {"width": 390, "height": 844}


class Operator:
    """One signed-in browser context; every page it visits is checked by axe."""

    def __init__(self, browser, running, viewport, label):
        self.base = running["url"]
        self.label = label
        self.context = browser.new_context(viewport=viewport)
        # axe is put in every page before its own scripts (by the browser, as an extension
        # would): a <script> tag added to the page is refused by its Content-Security-Policy.
        self.context.add_init_script(path=str(AXE))
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda dialog: dialog.accept())
        self.axe: dict[str, list[dict]] = {}
        self.page.goto(f"{self.base}/dashboard/")
        self.page.fill("input[name=username]", running["username"])
        self.page.fill("input[name=password]", running["password"])
        self.page.click("button[type=submit]")
        self.page.wait_for_selector("#live")

    def visit(self, path: str, name: str, ready: str = "#live") -> None:
        response = self.page.goto(self.base + path if path.startswith("/") else path)
        assert response is not None and response.status == 200, (path, response.status)
        self.settle(name, ready)

    def settle(self, name: str, ready: str = "#live") -> None:
        self.page.wait_for_selector(ready, timeout=30000)
        self.page.wait_for_load_state("networkidle")
        screenshot(self.page, f"operator-{self.label}-{name}")
        self.check_axe(name)

    def check_axe(self, name: str) -> None:
        result = self.page.evaluate(
            "async () => { const r = await axe.run(document, {resultTypes: ['violations']});"
            " return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,"
            " nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))})); }"
        )
        self.axe[f"{self.label}/{name}"] = result

    def blocking(self) -> dict[str, list[dict]]:
        return {
            page: [v for v in found if v["impact"] in BLOCKING]
            for page, found in self.axe.items()
            if any(v["impact"] in BLOCKING for v in found)
        }

    def active(self) -> dict:
        return self.page.evaluate(
            "() => ({id: document.activeElement.id, tag: document.activeElement.tagName,"
            " text: document.activeElement.textContent.trim()})"
        )

    def tab_to(self, text: str, limit: int = 40) -> None:
        """Press Tab until the focused element reads `text` (keyboard only, no clicks)."""
        for _ in range(limit):
            self.page.keyboard.press("Tab")
            if self.active()["text"] == text:
                return
        raise AssertionError(f"{text!r} not reachable by Tab; last focus {self.active()}")

    def refreshes(self) -> int:
        return int(self.page.get_attribute("#live", "data-refreshes") or 0)


def _save_axe(*operators: Operator) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    merged: dict[str, list[dict]] = {}
    for operator in operators:
        merged.update(operator.axe)
    (ARTIFACTS / "axe-results.json").write_text(json.dumps(merged, indent=2, sort_keys=True))


RERUN_DAG = (
    "dag: rerun-walk\ntasks:\n"
    "  - id: check\n    handler: {type: python, callable: fail_permanently}\n"
    "  - id: after\n    depends_on: [check]\n    handler: {type: python, callable: noop}\n"
)


def _rerun_walk(desk: Operator) -> str:
    """Create, run and re-run a DAG whose `check` node fails; what a person then sees of the
    node's two attempts. Returns the run's path."""
    page = desk.page
    desk.visit("/dashboard/dags/new", "dag-new-rerun", "#dag-form")
    page.fill("#definition", RERUN_DAG)
    page.click("#btn-save-dag")
    page.wait_for_selector("#btn-dag-trigger")
    page.click("#btn-dag-trigger")
    page.wait_for_selector("#dag-graph")
    page.wait_for_selector("#live[data-polling='stopped']", timeout=180000)
    assert page.get_attribute("#run-summary", "data-run-status") == "failed"
    assert page.locator("#node-attempts").count() == 0  # nothing was re-run yet
    with page.expect_navigation():
        page.click("#btn-run-rerun")
    page.wait_for_selector("#live[data-polling='stopped']", timeout=180000)
    assert page.get_attribute("#run-summary", "data-run-status") == "failed"
    desk.settle("dag-run-rerun", "#node-attempts")
    table = page.locator("#node-attempts")
    assert table.is_visible()
    rows = page.eval_on_selector_all(
        "#node-attempts tbody tr",
        "rows => rows.map(r => [r.dataset.nodeId, r.dataset.attempt, !!r.dataset.current])",
    )
    assert rows == [
        ["check", "1", False],
        ["check", "2", True],
        ["after", "1", False],  # upstream_failed both times: never started
        ["after", "2", True],
    ], rows
    first = page.locator("#node-attempts tr[data-node-id='check'][data-attempt='1']")
    text = first.inner_text()
    assert "failed" in text.lower() and "the run" in text, text
    second = page.inner_text("#node-attempts tr[data-node-id='check'][data-attempt='2']")
    assert "re-run of the run" in second and "user:" in second, second
    assert first.locator("a:text('log')").count() == 1
    # The Gantt: the check row has its earlier attempt as a bar of its own, beside the new one.
    earlier = page.locator("#gantt .gantt-row[data-node-id='check'] .gantt-bar.gantt-earlier")
    assert earlier.count() == 1 and earlier.is_visible()
    assert earlier.get_attribute("data-attempt") == "1"
    current = page.locator("#gantt .gantt-row[data-node-id='check'] .gantt-bar:not(.gantt-earlier)")
    assert current.get_attribute("data-attempt") == "2"
    boxes = [earlier.bounding_box(), current.bounding_box()]
    assert all(box and box["width"] > 0 for box in boxes), boxes
    assert boxes[0]["x"] <= boxes[1]["x"], boxes  # the first attempt ran first
    assert "#2" in page.inner_text("#gantt .gantt-row[data-node-id='check'] .gantt-label")
    first.locator("a:text('check attempt 1: run')").click()
    page.wait_for_selector("#timeline")
    assert page.inner_text("h1").startswith("Execution of rerun-walk › run ")
    page.go_back()
    page.wait_for_selector("#node-attempts")
    return page.url.split(desk.base, 1)[1]


# The walk runs three DAGs on the stack's worker and waits for live refreshes: longer than the
# suite's default 300 s on a loaded machine (as the stack walk in test_stack_browser).
@pytest.mark.timeout(900)
def test_an_operators_day_on_the_stack(stack, stack_browser):
    desk = Operator(stack_browser, stack, {"width": 1366, "height": 900}, "desk")
    phone = None
    page = desk.page
    try:
        desk.visit("/dashboard/", "overview")
        # Keyboard alone: the skip link comes first, then the nav; Enter opens Tasks.
        page.keyboard.press("Tab")
        assert desk.active()["text"] == "Skip to the page"
        desk.tab_to("Tasks")
        page.keyboard.press("Enter")
        page.wait_for_url("**/dashboard/tasks")
        desk.settle("tasks")
        assert "task" in page.inner_text("#tasks-count")
        task_name = page.inner_text("#tasks tbody tr td a")
        desk.tab_to(task_name)
        page.keyboard.press("Enter")
        page.wait_for_selector("#btn-trigger")
        desk.settle("task")
        task_path = page.url.split(stack["url"], 1)[1]
        desk.tab_to("Trigger now")
        page.keyboard.press("Enter")
        # The message names the run and links to it.
        link = page.wait_for_selector(".messages a[href*='/dashboard/executions/']")
        assert link.inner_text() in page.inner_text(".messages")
        assert page.inner_text(".messages").startswith(f"Triggered {task_name}: run ")
        link.focus()
        page.keyboard.press("Enter")
        page.wait_for_selector("#timeline")
        desk.settle("execution")
        execution_path = page.url.split(stack["url"], 1)[1]

        # The Runs page: search by keyboard, counted, the triggered run among the matches.
        desk.visit("/dashboard/runs", "runs")
        page.focus("#f-q")
        page.keyboard.type(task_name)
        page.keyboard.press("Enter")
        page.wait_for_url("**q=*")
        desk.settle("runs-search")
        count = page.inner_text("#runs-count")
        assert "task run" in count and not count.startswith("0 "), count
        assert task_name in page.inner_text("#runs")

        # A DAG run by the stack's worker; its node executions are named by DAG, run and node.
        desk.visit("/dashboard/dags", "dags", "#dags")
        page.click("#dags a:text('fan-out-example')")
        page.wait_for_selector("#btn-dag-trigger")
        desk.settle("dag")
        dag_path = page.url.split(stack["url"], 1)[1]
        # The definition is drawn before any run.
        drawn = page.eval_on_selector_all(
            "#dag-definition-graph g.dag-node", "gs => gs.map(g => g.dataset.nodeId)"
        )
        assert sorted(drawn) == ["list", "merge", "process"], drawn
        # Triggered with parameters, typed in the form.
        page.click("#btn-trigger-parameters")
        page.fill("#trigger-dialog-json", '{"batch": "b-17"}')
        page.click("#trigger-dialog-submit")
        page.wait_for_selector("#dag-graph")
        page.wait_for_selector("#live[data-polling='stopped']", timeout=180000)
        assert page.get_attribute("#run-summary", "data-run-status") == "success"
        assert "Triggered fan-out-example with parameters: run " in page.inner_text(".messages")
        desk.settle("dag-run")
        run_url = page.url
        # The fan-out node's shards, each with its run and its log.
        assert page.locator("#shards tbody tr").count() == 3
        log = page.locator("#shards a:text('log')").first.get_attribute("href")
        assert page.request.get(stack["url"] + log).ok
        # The DAG's grid: a row per node, the run's column all green.
        desk.visit(dag_path, "dag-grid", "#dag-grid")
        states = page.eval_on_selector_all(
            "#dag-grid tbody tr",
            "rows => rows.map(r => [r.dataset.nodeId,"
            " [...r.querySelectorAll('.cell')].map(c => c.dataset.state).pop()])",
        )
        assert dict(states) == dict.fromkeys(("list", "process", "merge"), "success"), states
        desk.visit("/dashboard/runs?dag=fan-out-example&window=1h", "runs-dag-nodes")
        runs_text = page.inner_text("#runs")
        assert "fan-out-example › run " in runs_text and "› process [0]" in runs_text
        run_path = run_url.split(stack["url"], 1)[1]
        assert page.locator(f"#runs a[href='{run_path}']").count() >= 4  # list, 3 shards, merge
        assert page.locator("#runs a[href*='/dashboard/tasks/']").count() == 0
        desk.visit("/dashboard/runs?kind=dags", "runs-dags")
        assert page.locator(f"#runs a[href='{run_path}']").count() == 1
        # The node's execution page is titled by its run, and its task offers no buttons.
        page.goto(run_url)
        page.click("#dag-graph g[data-node-id='merge'] a")
        page.wait_for_selector("#timeline")
        assert page.inner_text("h1").startswith("Execution of fan-out-example › run ")

        # Live refreshes keep a focused link focused, and wait while a form is in use.
        desk.visit("/dashboard/", "overview-live")
        page.focus("#all-runs")
        before = desk.refreshes()
        wait_for_js(
            page,
            f"Number(document.querySelector('#live').dataset.refreshes || 0) >= {before + 3}",
            timeout=30000,
        )
        assert desk.active()["id"] == "all-runs"
        # A focused run stays focused when newer runs push it down the table: one is
        # triggered through the API meanwhile, as a script of the operator's would.
        first_row = "document.querySelector('#recent tbody tr').dataset.executionId"
        focused = page.evaluate(f"() => {first_row}")
        page.focus(f"#recent tr[data-execution-id='{focused}'] a[href*='/executions/']")
        task_id = task_path.rstrip("/").rsplit("/", 1)[1]
        stack_api(stack, "POST", f"/api/v1/tasks/{task_id}/trigger", stack_token(stack), {})
        wait_for_js(page, f"{first_row} !== '{focused}'", timeout=60000)
        still = page.evaluate(
            "() => document.activeElement.closest('tr') &&"
            " document.activeElement.closest('tr').dataset.executionId"
        )
        assert still == focused
        page.focus("#all-runs")
        page.keyboard.press("Enter")
        page.wait_for_url("**/dashboard/runs")
        desk.visit("/dashboard/runs", "runs-paused")
        wait_for_js(page, "Number(document.querySelector('#live').dataset.refreshes) >= 1")
        page.focus("#f-worker")
        held = desk.refreshes()
        for _ in range(4):  # four polls of the stack's (DASHBOARD_POLL_SECONDS=1), each held
            page.evaluate("document.getElementById('updated-at').textContent = ''")
            wait_for_js(
                page,
                "document.getElementById('updated-at').textContent.includes('paused')",
                timeout=30000,
            )
        assert desk.refreshes() == held
        page.evaluate("document.activeElement.blur()")
        wait_for_js(
            page,
            f"Number(document.querySelector('#live').dataset.refreshes) > {held}",
            timeout=30000,
        )

        # Forms say everything at once: the summary takes focus; a DAG's error is at its line.
        desk.visit("/dashboard/tasks/new", "task-new", "#task-form")
        page.fill("#id_schedule_expression", "61 * * * *")
        page.click("#btn-save")
        page.wait_for_selector("#form-errors")
        assert desk.active()["id"] == "form-errors"
        assert page.locator("#form-errors li").count() >= 2  # the name and the cron expression
        desk.settle("task-new-errors", "#form-errors")
        desk.visit("/dashboard/dags/new", "dag-new", "#dag-form")
        page.fill(
            "#definition",
            "dag: walk\ntasks:\n  - id: a\n    depends_on: [zz]\n"
            "    handler: {type: python, callable: noop}\n",
        )
        page.click("#btn-save-dag")
        page.wait_for_selector("#error-line")
        assert page.inner_text("#error-line") == "Line 4"
        page.click("#error-line")
        assert desk.active()["id"] == "definition"
        assert (
            page.evaluate(
                "() => { const e = document.getElementById('definition');"
                " return e.value.substring(e.selectionStart, e.selectionEnd); }"
            )
            == "    depends_on: [zz]"
        )
        desk.settle("dag-new-errors", "#form-errors")

        # A re-run node keeps every attempt: a DAG whose first node fails for good, run, then
        # re-run from its page; both attempts are in the node's history and the Gantt.
        rerun_path = _rerun_walk(desk)

        for path, name in (
            ("/dashboard/dlq", "dlq"),
            ("/dashboard/missed?hours=1", "missed"),
            ("/dashboard/workers", "workers"),
        ):
            desk.visit(path, name)

        # A phone: nothing scrolls sideways, the nav wraps and stays readable, a usable Gantt.
        phone = Operator(stack_browser, stack, PHONE, "phone")
        for path, name in (
            ("/dashboard/", "overview"),
            ("/dashboard/runs", "runs"),
            ("/dashboard/tasks", "tasks"),
            ("/dashboard/dlq", "dlq"),
            ("/dashboard/dags", "dags"),
            (dag_path, "dag"),
            (task_path, "task"),
            (execution_path, "execution"),
            ("/dashboard/missed?hours=1", "missed"),
            ("/dashboard/workers", "workers"),
            (run_path, "dag-run"),
            (rerun_path, "dag-run-rerun"),
        ):
            phone.visit(path, name)
            overflow = phone.page.evaluate(
                "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 1, (name, overflow)
            nav = phone.page.evaluate(
                "() => [...document.querySelectorAll('.top nav a')].map(a => "
                "a.getBoundingClientRect().right)"
            )
            assert nav and max(nav) <= PHONE["width"], (name, nav)
        track = phone.page.eval_on_selector(
            "#gantt .gantt-row[data-node-id] .gantt-track", "t => t.getBoundingClientRect().width"
        )
        assert track >= 200, track

        assert desk.errors == [] and phone.errors == [], desk.errors + phone.errors
    finally:
        _save_axe(*(o for o in (desk, phone) if o is not None))
        desk.context.close()
        if phone is not None:
            phone.context.close()
    blocking = desk.blocking() | phone.blocking()
    assert blocking == {}, json.dumps(blocking, indent=1)
