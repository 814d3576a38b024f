"""The selects that load another page (the tenant switcher, the missed-schedules window) go
on their button or Enter, never on change (WCAG 3.2.2): the page marks them for Enter, gives
each a submit button, and no script sends a form on change."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.django_db

STATIC = Path(__file__).resolve().parents[2] / "dashboard" / "static" / "dashboard"


def _form_around(page: str, marker: str) -> str:
    at = page.index(marker)
    return page[page.rindex("<form", 0, at) : page.index("</form>", at)]


def test_the_tenant_switch_and_the_missed_window_submit_on_a_button(signed_in):
    page = signed_in.get("/dashboard/missed?hours=6").content.decode()
    window = _form_around(page, 'id="missed-hours"')
    assert "data-submit-on-enter" in window and 'id="btn-missed-window"' in window
    switch = _form_around(page, 'name="tenant"')
    assert "data-submit-on-enter" in switch and 'id="btn-tenant-switch"' in switch
    assert "data-autosubmit" not in page
    # The button's plain GET still works without any script.
    assert signed_in.get("/dashboard/missed", {"hours": "24"}).status_code == 200


def test_no_script_submits_a_form_when_a_select_changes():
    # The browser walk (tests/browser/test_dialogs_browser.py) chooses without navigating.
    for script in STATIC.glob("*.js"):
        assert "autosubmit" not in script.read_text(), script
