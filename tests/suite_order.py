"""The longest test files first: how `make test` keeps two xdist workers busy to the end.

`--dist loadfile` hands whole files to the workers in the order of the work queue, one or two
ahead of what they run. xdist orders that queue by how many tests a file has, so files of
one long test (a chaos case, the browser walk: a minute or two each) came last and one
worker ran them alone while the other was idle. This plugin (tests/conftest.py loads it)
orders the files by the seconds they took last time, longest first, from
`tests/durations.json`: the longest ones start at once and the short ones fill in the end.
A file not recorded yet counts as a median one.

`python -m tests.run --record-durations` (a whole run) or
`pytest --record-durations tests/x/test_y.py` writes the seconds each file took (setup, call
and teardown of its tests) into tests/durations.json; files that ran are updated, the others
kept, files that no longer exist dropped.

Files that share a package-scoped fixture run as one unit on one worker (SHARED_UNITS), so the
fixture starts once: the stack `make run` starts, for the browser files that drive it.
"""

from __future__ import annotations

import collections
import json
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DURATIONS_FILE = Path(__file__).resolve().parent / "durations.json"

# file -> the unit it runs in (with the other files of that unit, on one worker).
SHARED_UNITS = {
    "tests/browser/test_stack_browser.py": "tests/browser/ (the make-run stack)",
    "tests/browser/test_operator_browser.py": "tests/browser/ (the make-run stack)",
    "tests/browser/test_sso_browser.py": "tests/browser/ (the make-run stack)",
    "tests/browser/test_approval_browser.py": "tests/browser/ (the make-run stack)",
    "tests/browser/test_runs_list_browser.py": "tests/browser/ (the make-run stack)",
    "tests/browser/test_rerun_browser.py": "tests/browser/ (the make-run stack)",
    "tests/browser/test_dialogs_browser.py": "tests/browser/ (the make-run stack)",
    "tests/browser/test_audit_browser.py": "tests/browser/ (the make-run stack)",
    "tests/browser/test_incidents_browser.py": "tests/browser/ (the make-run stack)",
}


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def unit_of(nodeid: str) -> str:
    path = _file_of(nodeid)
    return SHARED_UNITS.get(path, path)


def recorded_durations(path: Path = DURATIONS_FILE) -> dict[str, float]:
    try:
        return {name: float(seconds) for name, seconds in json.loads(path.read_text()).items()}
    except (FileNotFoundError, ValueError):
        return {}


def longest_first(nodeids: list[str], durations: dict[str, float]) -> list[str]:
    """The files' units, longest first (ties: as collected); each unit's tests in their
    collected order, the files of a unit one after the other."""
    default = statistics.median(durations.values()) if durations else 0.0
    position: dict[str, int] = {}
    seconds: dict[str, float] = collections.defaultdict(float)
    for index, nodeid in enumerate(nodeids):
        path = _file_of(nodeid)
        unit = unit_of(nodeid)
        if path not in position:
            position[path] = index
            seconds[unit] += durations.get(path, default)
        position.setdefault(unit, index)
    return sorted(
        nodeids,
        key=lambda nodeid: (
            -seconds[unit_of(nodeid)],
            position[unit_of(nodeid)],
            position[_file_of(nodeid)],
        ),
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        default=False,
        help="write the seconds each test file took into tests/durations.json",
    )


@pytest.hookimpl(trylast=True)  # after pytest-django's own reordering, kept within a file
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Only in xdist's workers (their collection is the order the work queue is built in);
    # a plain run keeps pytest's order. Every worker computes it from the same file.
    if not hasattr(config, "workerinput"):
        return
    by_id = {item.nodeid: item for item in items}
    items[:] = [by_id[nodeid] for nodeid in longest_first(list(by_id), recorded_durations())]


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LongestFirstScheduling(LoadFileScheduling):
        """xdist's loadfile in the collected order (longest first), shared units kept whole."""

        def __init__(self, config: pytest.Config, log=None) -> None:
            super().__init__(config, log)
            # xdist would reorder the files by their number of tests.
            config.option.loadscopereorder = False

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return LongestFirstScheduling(config, log)


class DurationsRecorder:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[_file_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput") or not self.seconds:
            return  # the controller records what its workers report
        durations = recorded_durations()
        durations.update({name: round(value, 2) for name, value in self.seconds.items()})
        kept = {name: value for name, value in durations.items() if (ROOT / name).exists()}
        ordered = dict(sorted(kept.items(), key=lambda pair: (-pair[1], pair[0])))
        DURATIONS_FILE.write_text(json.dumps(ordered, indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("record_durations"):
        config.pluginmanager.register(DurationsRecorder(), "suite-order-recorder")
