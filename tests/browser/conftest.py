"""A real headless Chromium (Debian's package) driven by Playwright against pytest-django's
live server. Without the browser (every module here is marked needs_os_tool("chromium"):
tests/os_suites.py) or Playwright only these tests skip, saying why."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from scripts.os_tools import tool_location
from tests.processes import wait_until

# CHROMIUM_PATH, else `chromium` where `make test`'s check finds it (scripts/os_tools.py).
CHROMIUM = tool_location("chromium") or os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
ROOT = Path(__file__).resolve().parents[2]


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -r requirements.txt)"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _missing()
    if reason is None:
        return
    for item in items:
        if "tests/browser" in str(item.fspath):
            item.add_marker(pytest.mark.skip(reason=f"browser tests skipped: {reason}"))


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop running in this thread for as long as it is
    # open; the test's own ORM calls (setting up data, asserting on rows) are plain
    # synchronous code all the same. One per module, not per session: a test file that runs
    # after this one in the same process (its own Playwright, or asyncio.run) must find no
    # loop running.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1366, "height": 860})
    # Nothing may come from the internet: any request off the live server fails the test.
    off_site: list[str] = []
    context.on(
        "request",
        lambda request: (
            off_site.append(request.url)
            if not request.url.startswith(("http://localhost", "http://127.0.0.1", "data:"))
            else None
        ),
    )
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    # What the Content-Security-Policy refused (Chromium reports each on the console).
    refused: list[str] = []
    page.on(
        "console",
        lambda message: (
            refused.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    yield page
    context.close()
    assert off_site == [], f"requests left the server: {off_site}"
    assert errors == [], f"JavaScript errors: {errors}"
    assert refused == [], f"CSP violations: {refused}"


def wait_for_js(page, expression: str, *, timeout: float = 30000) -> None:
    """Until the JavaScript `expression` is true in the page (`timeout` in ms, as Playwright's).

    Playwright's own wait_for_function builds its predicate with `new Function`, which the
    pages' Content-Security-Policy refuses (no 'unsafe-eval'); page.evaluate calls a function
    through the devtools protocol, which the policy does not govern. So this polls that."""
    deadline = time.monotonic() + timeout / 1000
    while True:
        try:
            if page.evaluate(f"() => Boolean({expression})"):
                return
        except Exception as error:  # a navigation replaced the page under the check
            if "Execution context was destroyed" not in str(error):
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout / 1000:.0f} s: {expression}")
        page.wait_for_timeout(50)


def screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def sign_in(page, live_server, path="/dashboard/", username="acme-admin"):
    page.goto(f"{live_server.url}{path}")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", "pw-123456")
    page.click("button[type=submit]")
    page.wait_for_selector("#live")
    # The charts are drawn on DOMContentLoaded; #live exists as soon as it is parsed.
    wait_for_js(page, "document.readyState === 'complete'")


def _postgres_on(var_dir: Path) -> list[psutil.Process]:
    return [
        process
        for process in psutil.process_iter(["name", "cmdline"])
        if process.info["name"] == "postgres"
        and str(var_dir) in " ".join(process.info["cmdline"] or [])
    ]


@pytest.fixture(scope="package")
def stack(tmp_path_factory, oidc_provider):
    """`make run` itself (free ports through RUN_ARGS): no DATABASE_URL, no REDIS_URL. Started
    once for the browser tests that drive it (test_stack_browser, test_operator_browser,
    test_sso_browser: `make test` runs them on one worker, tests/suite_order.py), stopped when
    they are done. Single sign-on is on, with the fixture's provider (tests/oidc_provider.py)
    through the OIDC_* environment an operator would set; password login stays on."""
    var_dir = tmp_path_factory.mktemp("stack") / "var"
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "MAKEFLAGS")
        and not key.startswith(("PYTEST_", "SCHEDULER_"))
    }
    env.update(SCHEDULER_VAR_DIR=str(var_dir), DASHBOARD_POLL_SECONDS="1", **oidc_provider.env())
    output = var_dir.parent / "runstack.out"
    with output.open("wb") as out:
        make = subprocess.Popen(
            ["make", "--no-print-directory", "run", "RUN_ARGS=--port 0 --flower-port 0"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        wait_until(
            lambda: "Dashboard:" in output.read_text(errors="replace") or make.poll() is not None,
            timeout=240,
            interval=0.5,
            message="make run to serve the dashboard",
        )
        if make.poll() is not None:
            raise AssertionError("make run exited")
    except AssertionError as error:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(make.pid, signal.SIGKILL)
        pytest.fail(f"make run did not come up ({error}):\n{output.read_text(errors='replace')}")
    text = output.read_text()
    base = re.search(r"Dashboard: (http://127\.0\.0\.1:\d+)/dashboard/", text).group(1)
    login = re.search(r"user (\S+) / password (\S+)", text)
    oidc_provider.redirect_uri_add(f"{base}/dashboard/sso/callback")
    (runstack,) = psutil.Process(make.pid).children()
    yield {"url": base, "username": login.group(1), "password": login.group(2)}
    # A supervisor's SIGTERM to make alone (make passes it on to nobody): the stack stops by
    # itself, the embedded PostgreSQL last, and no process is left behind.
    make.send_signal(signal.SIGTERM)
    make.wait(timeout=30)
    runstack.wait(timeout=90)  # not our child: its exit code is make's to see, and make is gone
    assert "stopping..." in output.read_text(errors="replace")
    assert _postgres_on(var_dir) == []


@pytest.fixture(scope="module")
def stack_browser():
    """A Chromium of its own for each module that drives the stack (one Playwright at a time
    in a process: see `browser`)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


def stack_api(stack, method: str, path: str, token: str | None = None, body=None) -> dict:
    """A call to the stack's REST API, as a script of its user would make it."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        stack["url"] + path,
        data=None if body is None else json.dumps(body).encode(),
        headers=headers,
        method=method,
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        raw = response.read()
    return json.loads(raw) if raw else {}  # a 204 (a delete) has no body


def stack_token(stack) -> str:
    credentials = {"username": stack["username"], "password": stack["password"]}
    return stack_api(stack, "POST", "/api/v1/auth/token", body=credentials)["access"]
