"""Collects each chaos case's scorecard; with CHAOS_REPORT set (`make chaos`), writes the
table there at the end of the session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.chaos.harness import LONG, CaseResult

_RESULTS: list[CaseResult] = []

COLUMNS = (
    ("case", "case"),
    ("fault", "fault"),
    ("fault_s", "fault_seconds"),
    ("fires", "fires"),
    ("attempts_run", "attempts_run"),
    ("worker_restarts", "restarts"),
    ("doubled", "doubled"),
    ("never_ended", "unended"),
    ("resumed_s", "resumed_seconds"),
    ("load_1m", "load"),
)
# The 1-minute load average when the suite was collected (the machine is shared).
_LOAD_AT_START = os.getloadavg()[0]


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/chaos" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def record_case():
    def record(result: CaseResult) -> CaseResult:
        _RESULTS.append(result)
        print(result)
        return result

    return record


def render(results: list[CaseResult]) -> str:
    from django.utils import timezone

    rows = [[str(getattr(r, attr)) for _, attr in COLUMNS] for r in results]
    header = [name for name, _ in COLUMNS]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    lines = [
        "# chaos",
        "",
        f"Measured {timezone.now().isoformat(timespec='seconds')}"
        f" ({'long' if LONG else 'short'} versions), on a {os.cpu_count()}-CPU machine shared"
        " with other test runs: 1-minute load average"
        f" {_LOAD_AT_START:.2f} when the suite started, {os.getloadavg()[0]:.2f} when it ended"
        " (load_1m: when each case ended).",
        "",
        "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + " |")
    lines += [
        "",
        "- doubled = fires recorded twice + attempts whose handler ran twice (a ledger each "
        "attempt writes as it starts) + runs marked success whose handler never started",
        "- never_ended = runs still pending/queued/running 60 s after the tasks were paused, "
        "or after the last of them fell due when retries over the retry budget were deferred "
        "to a later minute (beats and workers still running)",
        "- resumed_s = from the heal (worker-sigkill-mid-batch: from the kill, recorded as the "
        "SIGKILL is sent) to the first handler start at or after it, of a run scheduled after "
        "it; handler starts are dated by the ledger as the handler begins, not by the row's "
        "started_at, which a run claimed ahead of its time (fire-ahead) stamps before it falls "
        "due, so the figure is never negative",
        "- worker_restarts = workers that exited and were started again by the test's "
        "supervisor, as compose and Kubernetes restart them",
        "- real processes (beats, prefork workers, a private redis-server) on the machine's "
        "PostgreSQL (postgres-restart: on an embedded PostgreSQL the test stops and starts); "
        "one-second schedules",
    ]
    if LONG:
        lines.append(
            "- long versions: faults held 10-30 s (short: 2-6 s) over 4-12 one-second tasks "
            "(short: 2-6), the workers given 2-8 slots each (short: 2) for their handlers' load "
            "(tests/chaos/test_chaos.py): every task fires each second whatever still waits, so "
            "a load above the workers' capacity would grow a backlog that never drains"
        )
    lines.append("")
    return "\n".join(lines)


def pytest_sessionfinish(session, exitstatus):
    target = os.environ.get("CHAOS_REPORT")
    if target and _RESULTS:
        path = Path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(_RESULTS))
