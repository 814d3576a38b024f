"""`python -m bench NAME --help` prints the scenario's options and runs nothing."""

from __future__ import annotations

import subprocess
import sys


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args], capture_output=True, text=True, timeout=60
    )


def test_a_scenarios_help_prints_its_text_and_starts_nothing():
    result = _bench("ceiling", "--help")
    assert result.returncode == 0
    assert result.stdout.startswith("ceiling: ")
    assert "--tracing=off,full,default" in result.stdout
    # A bench that ran would have printed its table and written a result.
    assert "bench/results" not in result.stdout.split("\n", 1)[0]
    assert "| " not in result.stdout


def test_an_unknown_scenario_with_help_is_refused():
    result = _bench("nosuch", "--help")
    assert result.returncode == 2
    assert "unknown scenario(s): nosuch" in result.stdout
