"""Single sign-on in a real browser, on the stack `make run` starts with the fixture's OIDC
provider in its environment (tests/browser/conftest.py, tests/oidc_provider.py): a user of
the provider's `ops` group clicks "Log in with <provider>", signs in at the provider, and
lands on the dashboard as an operator of the mapped tenant, who is refused an admin's page.
Screenshot: tests/artifacts/sso-*.png."""

from __future__ import annotations

import pytest

from tests.browser.conftest import screenshot, wait_for_js
from tests.oidc_provider import PROVIDER_PASSWORD

pytestmark = pytest.mark.needs_os_tool("chromium")


def test_an_ops_user_signs_in_with_the_provider_as_an_operator(stack, stack_browser):
    context = stack_browser.new_context(viewport={"width": 1366, "height": 860})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        page.goto(f"{stack['url']}/dashboard/tasks")
        button = page.locator("#sso-login")
        assert button.inner_text() == "Log in with Fixture IdP"
        button.click()
        # At the provider, on its own login page.
        page.wait_for_selector("#provider-username")
        assert page.url.startswith("http://127.0.0.1:") and "/accounts/login/" in page.url
        page.fill("#provider-username", "olivia")
        page.fill("#provider-password", PROVIDER_PASSWORD)
        page.click("#provider-submit")
        # Back at the dashboard, on the page first asked for, signed in as olivia.
        try:
            page.wait_for_selector("#live", timeout=15000)
        except Exception:
            raise AssertionError(f"{page.url}\n{page.content()[:3000]}") from None
        wait_for_js(page, "document.readyState === 'complete'")
        assert page.url == f"{stack['url']}/dashboard/tasks"
        assert "Sign out olivia" in page.inner_text("header")
        tenant = page.locator("select[name=tenant] option[selected]")
        assert tenant.inner_text() == "demo (operator)"
        # An admin's page: not offered, and refused when asked for all the same.
        assert page.locator("nav a", has_text="Members").count() == 0
        screenshot(page, "sso-operator")
        refused = page.goto(f"{stack['url']}/dashboard/members")
        assert refused is not None and refused.status == 403
        assert "Invite" not in page.content()
        assert errors == []
    finally:
        context.close()
