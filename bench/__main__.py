"""Run benchmark scenarios and write their results to bench/results/.

    python -m bench quick          the quick set (make bench)
    python -m bench full           every scenario (make bench-full)
    python -m bench NAME [NAME..]  the named scenarios, e.g. `python -m bench dag`
    python -m bench list           what there is

A scenario is a module in bench/scenarios/ with NAME (str), QUICK (bool: part of the quick
set), DESCRIPTION (str) and `run(args: list[str]) -> bench.report.Result`.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import subprocess
import sys
import time
from types import ModuleType

from bench import scenarios, support
from bench.report import write_result

# Set for the scenarios a multi-scenario run starts: the run drops the database at its end.
KEEP_DATABASE = "BENCH_KEEP_DATABASE"


def _scenarios() -> dict[str, ModuleType]:
    found: dict[str, ModuleType] = {}
    for info in sorted(pkgutil.iter_modules(scenarios.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"bench.scenarios.{info.name}")
        if hasattr(module, "run") and hasattr(module, "NAME"):
            found[module.NAME] = module
    return found


def main(argv: list[str]) -> int:
    available = _scenarios()
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(__doc__)
        for name, module in available.items():
            tag = "quick" if getattr(module, "QUICK", False) else "full"
            print(f"  {name:<14} [{tag}] {getattr(module, 'DESCRIPTION', '')}")
        return 0
    if argv[0] == "quick":
        chosen, extra = [m for m in available.values() if getattr(m, "QUICK", False)], argv[1:]
    elif argv[0] == "full":
        chosen, extra = list(available.values()), argv[1:]
    else:
        names = [a for a in argv if not a.startswith("-")]
        unknown = [n for n in names if n not in available]
        if unknown:
            print(f"unknown scenario(s): {', '.join(unknown)}; try `python -m bench list`")
            return 2
        if "-h" in argv or "--help" in argv:
            # A scenario's options are in its module's text; asking for them runs nothing.
            for name in names:
                print(f"{name}: {available[name].__doc__ or available[name].DESCRIPTION}")
            return 0
        chosen, extra = [available[n] for n in names], [a for a in argv if a.startswith("-")]
    if len(chosen) > 1:
        # One process per scenario: each configures Django (and some their own database)
        # for itself, and a scenario must not inherit another's settings or connections.
        if argv[0] == "full" and "--full" not in extra:
            extra = [*extra, "--full"]
        # The scenarios share one benchmark database, migrated once; it goes at the end.
        child_env = {**os.environ, KEEP_DATABASE: "1"}
        try:
            failed = [
                module.NAME
                for module in chosen
                if subprocess.call(
                    [sys.executable, "-m", "bench", module.NAME, *extra], env=child_env
                )
                != 0
            ]
        finally:
            support.database_drop()
        if failed:
            print(f"\nfailed: {', '.join(failed)}")
        return 1 if failed else 0
    try:
        for module in chosen:
            started = time.monotonic()
            print(f"\n=== {module.NAME}: {getattr(module, 'DESCRIPTION', '')}")
            result = module.run(extra)
            paths = write_result(result)
            print(result.table())
            print(f"({time.monotonic() - started:.0f}s; wrote {', '.join(str(p) for p in paths)})")
    finally:
        if not os.environ.get(KEEP_DATABASE):
            support.database_drop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
