"""`make test`: lint (ruff, then import-linter's contracts in .importlinter), then the whole
pytest suite in parallel (pytest-xdist).

When PostgreSQL or Redis is missing it says which suites need them, runs the rest, and
fails: a run that could not test everything must not look green.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.services_check import missing_services


def main() -> int:
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
    missing = missing_services()
    # Importing the project sets DJANGO_SETTINGS_MODULE to the runtime settings as a
    # default; the suite must run with the test settings whatever the caller's shell has.
    os.environ["DJANGO_SETTINGS_MODULE"] = "project.settings.test"
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
    return subprocess.call(args)


if __name__ == "__main__":
    sys.exit(main())
