"""The stack's admin signed in to the dashboard in a browser context of its own, with axe-core
in every page (put in before the page's scripts: the CSP refuses an added tag), and every
failure a person would notice kept in `failures`: an answer of 400 or more, a request that
failed (one the browser cut short by leaving a page is not a failure), a console error, a page
error. The browser files of the make-run stack share it."""

from __future__ import annotations

from pathlib import Path

AXE = Path(__file__).resolve().parent / "vendor" / "axe-4.10.3.min.js"
BLOCKING = ("serious", "critical")
DESKTOP, PHONE = {"width": 1280, "height": 800}, {"width": 390, "height": 844}
AXE_VIOLATIONS = (
    "async () => { const r = await axe.run(document, {resultTypes: ['violations']});"
    " return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,"
    " nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))})); }"
)


class SignedIn:
    def __init__(
        self,
        browser,
        stack,
        viewport: dict,
        *,
        path: str = "/dashboard/",
        ready: str = "#live",
        timezone_id: str | None = None,
    ) -> None:
        self.base, self.width = stack["url"], viewport["width"]
        options = {"viewport": viewport, **({"timezone_id": timezone_id} if timezone_id else {})}
        self.context = browser.new_context(**options)
        self.context.add_init_script(path=str(AXE))
        self.page = self.context.new_page()
        self.failures: list[str] = []
        self.page.on("response", self._answered)
        self.page.on("requestfailed", self._failed)
        self.page.on(
            "console",
            lambda m: self.failures.append(f"console: {m.text}") if m.type == "error" else None,
        )
        self.page.on("pageerror", lambda e: self.failures.append(f"page error: {e}"))
        self.page.goto(f"{self.base}{path}")
        self.page.fill("input[name=username]", stack["username"])
        self.page.fill("input[name=password]", stack["password"])
        self.page.click("button[type=submit]")
        self.page.wait_for_selector(ready)

    def _answered(self, response) -> None:
        if response.status >= 400:
            self.failures.append(f"{response.status} {response.url}")

    def _failed(self, request) -> None:
        # Leaving a page cuts its poll and its live log stream short: not a failure.
        if "ERR_ABORTED" not in (request.failure or "") and "log-events" not in request.url:
            self.failures.append(f"failed {request.url}: {request.failure}")

    def blocking_axe(self) -> list[dict]:
        """axe-core's serious and critical violations on the page as it is now."""
        return [v for v in self.page.evaluate(AXE_VIOLATIONS) if v["impact"] in BLOCKING]

    def fits_the_width(self) -> bool:
        return self.page.evaluate(
            "() => document.documentElement.scrollWidth <= window.innerWidth + 1"
        )
