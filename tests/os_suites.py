"""Suites that need an operating-system tool say so, and skip with its reason when it is
missing, instead of failing by the dozen.

A test (or a whole module, through `pytestmark`) that cannot pass without one of the tools
of `scripts.os_tools.TOOLS` carries `@pytest.mark.needs_os_tool("bubblewrap")` (or
"slirp4netns", "pgbouncer", "chromium", "promtool", "alertmanager", "faketime"). `make test`
stops before the suite when a tool is missing, unless `SKIP_OS_SUITES=1`; then, and in a plain
`pytest` run on such a machine, the marked tests skip and the end of the run lists them by
tool, folder and file.
"""

from __future__ import annotations

import collections
import functools
import json
import os

import pytest

from scripts.os_tools import TOOLS_BY_NAME, missing_tools

MARKER = "needs_os_tool"
SKIP_PREFIX = "needs the OS tool "
# tests/run.py computes the missing tools once and hands them to every pytest process
# (xdist's workers would each probe bubblewrap again otherwise).
MISSING_ENV = "SCHEDULER_OS_TOOLS_MISSING"


@functools.cache
def missing() -> dict[str, str]:
    given = os.environ.get(MISSING_ENV)
    return json.loads(given) if given is not None else missing_tools()


def skip_reason(tool: str, why: str) -> str:
    return f"{SKIP_PREFIX}{tool}: {why} (needed by {TOOLS_BY_NAME[tool].needed_by})"


def mark_skips(items: list[pytest.Item]) -> None:
    for item in items:
        for marker in item.iter_markers(MARKER):
            for tool in marker.args:
                if tool not in TOOLS_BY_NAME:
                    raise pytest.UsageError(
                        f"{item.nodeid}: needs_os_tool({tool!r}): not one of "
                        f"{', '.join(TOOLS_BY_NAME)} (scripts/os_tools.py)"
                    )
                if tool in missing():
                    item.add_marker(pytest.mark.skip(reason=skip_reason(tool, missing()[tool])))


def summarize(terminalreporter) -> None:
    """Which suites skipped for want of which tool, by folder and file (on the xdist
    controller, from the workers' reports)."""
    skipped: dict[str, dict[str, collections.Counter]] = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if SKIP_PREFIX not in reason:
            continue
        tool = reason.split(SKIP_PREFIX, 1)[1].split(":", 1)[0]
        path = report.nodeid.split("::", 1)[0]
        folder, _, name = path.rpartition("/")
        skipped.setdefault(tool, {}).setdefault(folder, collections.Counter())[name] += 1
    if not skipped:
        return
    terminalreporter.section("skipped: these suites need OS tools this machine lacks")
    for tool, folders in sorted(skipped.items()):
        why = missing().get(tool, "missing")
        terminalreporter.write_line(f"{tool} ({why}):")
        for folder, files in sorted(folders.items()):
            terminalreporter.write_line(
                f"  {folder}/ ({sum(files.values())} tests): {', '.join(sorted(files))}"
            )
