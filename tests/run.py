"""`make test`: lint (ruff, then import-linter's contracts in .importlinter), then the whole
pytest suite in parallel (pytest-xdist).

When an operating-system tool the suites drive is missing (scripts/os_tools.py; `make test`
has already tried to install it) it stops with one message, or with `SKIP_OS_SUITES=1` runs
the rest and lists at the end the suites that skipped and why.

When PostgreSQL or Redis is missing it says which suites need them, runs the rest, and
fails: a run that could not test everything must not look green.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from scripts.os_tools import EXIT_MISSING, missing_message, missing_tools
from tests.os_suites import MISSING_ENV
from tests.services_check import missing_services


def main() -> int:
    missing_os = missing_tools()
    skip_os_suites = os.environ.get("SKIP_OS_SUITES") == "1"
    if missing_os and not skip_os_suites:
        print(missing_message(missing_os), file=sys.stderr)
        return EXIT_MISSING
    # Every pytest process (xdist's workers too) skips the same suites without probing again.
    os.environ[MISSING_ENV] = json.dumps(missing_os)
    lint = subprocess.call([sys.executable, "-m", "ruff", "check", "."])
    if lint != 0:
        print("ruff found problems (see above)", file=sys.stderr)
        return lint
    # The import contracts (services never import workers, the layers, ...): .importlinter.
    contracts = subprocess.call(
        [os.path.join(os.path.dirname(sys.executable), "lint-imports"), "--no-logo"]
    )
    if contracts != 0:
        print("import-linter found broken import contracts (see above)", file=sys.stderr)
        return contracts
    # No import cycle anywhere in the product, no package over 30% of its lines.
    graph = subprocess.call([sys.executable, "-m", "scripts.import_graph", "--check"])
    if graph != 0:
        print("scripts.import_graph --check found problems (see above)", file=sys.stderr)
        return graph
    missing = missing_services()
    # Importing the project sets DJANGO_SETTINGS_MODULE to the runtime settings as a
    # default; the suite must run with the test settings whatever the caller's shell has.
    os.environ["DJANGO_SETTINGS_MODULE"] = "project.settings.test"
    # Two processes on two cores. Three finished sooner (694 s against 797 s) but lost timing
    # races under the load (a retry chain past its wait, a lockout's seconds), so two it is.
    workers = os.environ.get("TEST_WORKERS", "2")
    # The files go out longest first (tests/suite_order.py); the 15 slowest tests are listed.
    args = [sys.executable, "-m", "pytest", "-n", workers, "--dist", "loadfile", "--durations=15"]
    args += sys.argv[1:]
    if missing:
        print("\n" + "=" * 78)
        for name, problem in missing.items():
            print(f"{name} is not reachable: {problem}")
        print(
            "The suites that need PostgreSQL and Redis are skipped; the end of the run lists"
            " them by folder and file."
        )
        print("Set DATABASE_URL / REDIS_URL or start the services, then run `make test` again.")
        print("=" * 78 + "\n")
        os.environ["SCHEDULER_TESTS_WITHOUT_SERVICES"] = "1"
        code = subprocess.call(args)
        print("\nFAILED: only the unit suites ran; those listed above need PostgreSQL and Redis.")
        return code or 1
    code = subprocess.call(args)
    if missing_os:
        print(
            f"\nSKIP_OS_SUITES=1: the suites that need {', '.join(missing_os)} did not run"
            " (listed above, with why); install them to test everything."
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
