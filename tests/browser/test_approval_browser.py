"""An approval node on the stack `make run` starts, in a real browser: the admin triggers a
run of sign-off -> b through the API; an operator signs in, sees the node drawn in the
approval colour with its time left, types a comment and clicks Approve; the node turns green
and b runs on the stack's own worker. Screenshot: tests/artifacts/stack-approval*.png."""

from __future__ import annotations

import pytest

from tests.browser.conftest import screenshot, stack_api, stack_token, wait_for_js

pytestmark = pytest.mark.needs_os_tool("chromium")

VIOLET, GREEN = "rgb(112, 72, 232)", "rgb(76, 175, 80)"
ECHO = {"type": "python", "callable": "upstream_echo"}
PASSWORD = "Approver-pw-2026"


def _fill(node_id: str) -> str:
    return (
        "getComputedStyle(document.querySelector("
        f"'#dag-graph g.dag-node[data-node-id=\"{node_id}\"] rect.node-box')).fill"
    )


def _operator(stack, token: str) -> str:
    """An operator of the stack's tenant, by the invitation API (the stack has only its
    admin, who triggers the run and so may not approve it)."""
    invited = stack_api(stack, "POST", "/api/v1/members", token, {"role": "operator"})
    stack_api(
        stack,
        "POST",
        "/api/v1/invitations/accept",
        body={"token": invited["token"], "username": "approver", "password": PASSWORD},
    )
    return "approver"


@pytest.mark.timeout(600)
def test_an_operator_approves_on_the_run_page_and_the_run_goes_on(stack, stack_browser):
    token = stack_token(stack)
    username = _operator(stack, token)
    dag = stack_api(
        stack,
        "POST",
        "/api/v1/dags",
        token,
        {
            "dag": "browser-gated",
            "tasks": [
                {
                    "id": "sign-off",
                    "type": "approval",
                    "approvers": {"role": "operator", "count": 1},
                    "timeout": "2h",
                    "message": "Publish the report?",
                },
                {"id": "b", "handler": ECHO, "depends_on": ["sign-off"]},
            ],
        },
    )
    run = stack_api(stack, "POST", f"/api/v1/dags/{dag['id']}/trigger", token, {})
    context = stack_browser.new_context(viewport={"width": 1366, "height": 860})
    try:
        page = context.new_page()
        page.goto(f"{stack['url']}/dashboard/dags/{dag['id']}/runs/{run['id']}")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_selector("#dag-graph")
        # A root: it waits from the run's start, drawn in the approval colour.
        wait_for_js(page, f"{_fill('sign-off')} === '{VIOLET}'", timeout=30000)
        page.wait_for_selector("#btn-approve-sign-off")
        assert "left" in page.text_content(
            '#dag-graph g.dag-node[data-node-id="sign-off"] .node-time-left'
        )
        assert "Publish the report?" in page.inner_text("#approvals")
        screenshot(page, "stack-approval-waiting")
        page.fill("#approval-comment-sign-off", "numbers checked")
        page.click("#btn-approve-sign-off")
        page.wait_for_selector('#approvals tr[data-approval-status="approved"]')
        assert "Approved sign-off" in page.inner_text("[role=status]")
        assert "numbers checked" in page.inner_text("#approvals")
        wait_for_js(page, f"{_fill('b')} === '{GREEN}'", timeout=60000)
        assert page.evaluate(_fill("sign-off")) == GREEN
        screenshot(page, "stack-approval-approved")
    finally:
        context.close()
    detail = stack_api(stack, "GET", f"/api/v1/dags/{dag['id']}/executions/{run['id']}", token)
    assert detail["status"] == "success"
    (approval,) = detail["approvals"]
    assert [(d["user"], d["via"], d["comment"]) for d in approval["decisions"]] == [
        ("approver", "dashboard", "numbers checked")
    ]
    # The stack is shared: a gated DAG left on it would be the first of the DAG list the next
    # browser test triggers, and its root waits for people.
    stack_api(stack, "DELETE", f"/api/v1/dags/{dag['id']}", token)
