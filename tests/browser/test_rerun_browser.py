"""Re-running what an operator chooses, on the stack `make run` starts, in a real browser: a
failed run is re-run from its page with edited parameters (the form prefilled with the run's
own), then retried from the filtered dead-letter page by its checkbox, and a DAG run's middle
node is cleared with its downstream, which the stack's worker runs again to success. The run
page, the dead-letter page and the DAG run page pass axe-core at desktop (1280x800) and phone
(390x844) widths, with no failed request and no console error. What the test made
is deleted. Screenshots: tests/artifacts/rerun-*.png."""

from __future__ import annotations

import json

import pytest

from tests.browser.conftest import screenshot, stack_api, stack_token, wait_for_js
from tests.browser.signed_in import DESKTOP, PHONE, SignedIn
from tests.processes import wait_until

pytestmark = pytest.mark.needs_os_tool("chromium")

ECHO = {"type": "python", "callable": "upstream_echo"}


class Watched(SignedIn):
    """The stack's admin signed in; `check` is what every page of the walk must pass."""

    def check(self, name: str, ready: str) -> None:
        self.page.wait_for_selector(ready, timeout=30000)
        self.page.wait_for_load_state("networkidle")
        screenshot(self.page, f"rerun-{name}-{self.width}")
        blocking = self.blocking_axe()
        assert blocking == [], f"{name} at {self.width}: {blocking}"
        # Nothing wider than the screen makes the page scroll sideways.
        scroll = self.page.evaluate("() => document.documentElement.scrollWidth")
        assert scroll <= self.width + 1, f"{name} at {self.width}: {scroll} px wide"
        assert self.failures == [], f"{name} at {self.width}: {self.failures}"


def _ended(stack, token, path):
    def done():
        body = stack_api(stack, "GET", path, token)
        return body if body["status"] not in ("pending", "queued", "running") else None

    return wait_until(done, timeout=120, interval=0.5, message=f"{path} to end")


@pytest.mark.timeout(600)
def _audited(stack, token: str, verb: str, object_id: str) -> list[str]:
    """The reasons of the dashboard's entries of `verb` on the object."""
    path = f"/api/v1/audit?verb={verb}&object_id={object_id}"
    entries = stack_api(stack, "GET", path, token)["results"]
    assert all(
        e["via"] == "dashboard" and e["actor"] == f"user:{stack['username']}" for e in entries
    )
    return [e["reason"] for e in entries]


def test_an_operator_reruns_a_failed_run_and_clears_a_dag_node(stack, stack_browser):
    token = stack_token(stack)
    task = stack_api(
        stack,
        "POST",
        "/api/v1/tasks",
        token,
        {
            "name": "browser-rerun-fails",
            "schedule": {"type": "manual"},
            "handler": {"type": "python", "callable": "fail"},
            "retry_policy": {"max_attempts": 1},
        },
    )
    dag = stack_api(
        stack,
        "POST",
        "/api/v1/dags",
        token,
        {
            "dag": "browser-rerun-diamond",
            "tasks": [
                {"id": "a", "handler": ECHO},
                {"id": "b", "handler": ECHO, "depends_on": ["a"]},
                {"id": "c", "handler": ECHO, "depends_on": ["a"]},
                {"id": "d", "handler": ECHO, "depends_on": ["b", "c"]},
            ],
        },
    )
    desk = phone = None
    try:
        fired = stack_api(
            stack, "POST", f"/api/v1/tasks/{task['id']}/trigger", token, {"parameters": {"n": 1}}
        )
        run = stack_api(stack, "POST", f"/api/v1/dags/{dag['id']}/trigger", token, {})
        failed = _ended(stack, token, f"/api/v1/executions/{fired['execution_id']}")
        assert failed["status"] == "failed"
        dag_run_path = f"/api/v1/dags/{dag['id']}/executions/{run['id']}"
        assert _ended(stack, token, dag_run_path)["status"] == "success"

        desk = Watched(stack_browser, stack, DESKTOP)
        page = desk.page
        page.goto(f"{stack['url']}/dashboard/executions/{failed['id']}")
        desk.check("run", "#btn-rerun")
        page.click("#rerun-with-parameters summary")
        assert json.loads(page.input_value("#rerun-parameters")) == {"n": 1}  # prefilled
        page.fill("#rerun-parameters", '{"n": 2}')
        page.fill("#rerun-note", "after the fix")
        page.click("#btn-rerun-with-parameters")
        page.wait_for_url(lambda url: failed["id"] not in url, timeout=30000)
        message = page.inner_text(".messages")
        assert message.startswith("Re-running browser-rerun-fails: new run ")
        rerun_id = page.url.rstrip("/").rsplit("/", 1)[1]
        assert rerun_id != failed["id"]
        rerun = stack_api(stack, "GET", f"/api/v1/executions/{rerun_id}", token)
        assert (rerun["trigger"], rerun["rerun_of"], rerun["parameters"]) == (
            "rerun",
            failed["id"],
            {"n": 2},
        )
        desk.check("new-run", "#timeline")

        # The dead-letter page, filtered to this test's task: select its first run, retry it.
        dlq = f"{stack['url']}/dashboard/dlq?task=browser-rerun-fails"
        page.goto(dlq)
        desk.check("dlq", "#dlq-filter")
        page.check(f'tr[data-execution-id="{failed["id"]}"] .dlq-select')
        page.click("#dlq-retry-selected")
        page.wait_for_selector(".bulk-report")
        report = page.inner_text(".messages")
        assert "Retry selected 1: 1 retried." in report, report
        assert f"browser-rerun-fails run {failed['id'][:8]}: retried" in report

        page.goto(f"{stack['url']}/dashboard/dags/{dag['id']}/runs/{run['id']}")
        desk.check("dag-run", "#node-actions-title")
        node_b = '.node-actions li[data-node-id="b"]'
        page.click(f"{node_b} summary")
        page.fill(f"{node_b} input[name=note]", "b read stale data")
        page.click(f"{node_b} .node-clear-downstream")
        page.wait_for_selector(".messages")
        assert "Cleared b, d: the run is running again." in page.inner_text(".messages")
        # The page follows the run live until the worker has run b and then d again.
        wait_for_js(
            page,
            "document.querySelector('#run-summary').dataset.runStatus === 'success'",
            timeout=90000,
        )
        page.reload()  # the node actions show on an ended run's page
        desk.check("dag-run-cleared", "#node-actions-title")
        detail = stack_api(stack, "GET", dag_run_path, token)
        nodes = {n["node_id"]: n for n in detail["nodes"]}
        assert [nodes[n]["attempt_number"] for n in "abcd"] == [1, 2, 1, 2]
        assert nodes["d"]["attempt_trigger"] == "clear"
        # Each click is in the audit log, in words, with the reason typed beside it.
        assert _audited(stack, token, "execution.rerun", failed["id"]) == ["after the fix"]
        assert _audited(stack, token, "dlq.retry", failed["id"]) == [""]
        assert _audited(stack, token, "dag_node.clear", run["id"]) == ["b read stale data"]

        phone = Watched(stack_browser, stack, PHONE)
        phone.page.goto(f"{stack['url']}/dashboard/executions/{failed['id']}")
        phone.check("run", "#btn-rerun")
        phone.page.goto(dlq)
        phone.check("dlq", "#dlq-filter")
        phone.page.goto(f"{stack['url']}/dashboard/dags/{dag['id']}/runs/{run['id']}")
        phone.page.click('.node-actions li[data-node-id="c"] summary')
        phone.check("dag-run", "#node-actions-title")
    finally:
        for watched in (desk, phone):
            if watched is not None:
                watched.context.close()
        # The stack is shared: what this test made goes (its runs go with them).
        stack_api(stack, "DELETE", f"/api/v1/dags/{dag['id']}", token)
        stack_api(stack, "DELETE", f"/api/v1/tasks/{task['id']}", token)
