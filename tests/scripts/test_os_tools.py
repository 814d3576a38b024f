"""`make test` on a machine without the operating-system tools its suites drive
(scripts/os_tools.py): it stops within seconds with one message naming them and the command
that installs them, installs them itself where it may, or with SKIP_OS_SUITES=1 runs on, and
the suites that need a missing tool skip, saying why, and are listed at the end.

The tools are hidden by giving the check a search path of a folder of this test's
(`OS_TOOLS_PATH`); `OS_TOOLS_INSTALL=no` makes it believe it may not install, and where it
may, the `apt-get` it finds first on PATH is this test's stand-in, so no test runs apt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MESSAGE = "make test: the test suites need"

# What the stand-in apt-get "installs": the package's command, as a script that succeeds.
FAKE_APT_GET = """#!/bin/sh
echo "$*" >> "{record}"
[ "$1" = install ] || exit 0
for package in "$@"; do
  case "$package" in
    -*|install) continue ;;
    bubblewrap) command=bwrap ;;
    prometheus) command=promtool ;;
    *) command="$package" ;;
  esac
  printf '#!/bin/sh\\nexit 0\\n' > "{tools}/$command" && chmod +x "{tools}/$command"
done
"""


def _executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> None:
    path.write_text(text)
    path.chmod(0o755)


@pytest.fixture
def machine(tmp_path):
    """A search path holding only pgbouncer, and a PATH whose apt-get and sudo are stand-ins
    that record their calls."""
    tools, bin_dir = tmp_path / "tools", tmp_path / "bin"
    tools.mkdir()
    bin_dir.mkdir()
    _executable(tools / "pgbouncer")
    record = tmp_path / "apt-calls"
    _executable(bin_dir / "apt-get", FAKE_APT_GET.format(record=record, tools=tools))
    # A non-root run asks `sudo -n true` first, then runs apt-get through it.
    _executable(bin_dir / "sudo", '#!/bin/sh\n[ "$1" = -n ] && shift\nexec "$@"\n')
    env = {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "OS_TOOLS_PATH": str(tools),
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
    }
    return env, record, tools


def _check(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scripts.os_tools", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_make_test_stops_with_one_message_naming_the_missing_tools(machine):
    env, record, _ = machine
    # PY=false: were the check to let it through, make would run `false`, not the suite.
    done = subprocess.run(
        ["make", "--no-print-directory", "test", f"PYTHON={sys.executable}", "PY=false"],
        cwd=ROOT,
        env={**env, "OS_TOOLS_INSTALL": "no"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert done.stderr.count(MESSAGE) == 1, done.stderr
    assert (
        "machine cannot give them: bubblewrap, slirp4netns, chromium, promtool, alertmanager,"
        " faketime." in done.stderr
    )
    assert "  - pgbouncer" not in done.stderr
    assert "apt-get install -y bubblewrap slirp4netns chromium faketime" in done.stderr
    assert "apt-get install -y --no-install-recommends prometheus\n" in done.stderr
    assert "apt-get install -y --no-install-recommends prometheus-alertmanager" in done.stderr
    assert "make test SKIP_OS_SUITES=1" in done.stderr
    # It stopped at the check: neither the virtualenv step nor the suite ran.
    assert "tests.run" not in done.stdout + done.stderr
    assert not record.exists(), "apt-get ran although the check was told it may not install"


def test_the_check_exits_2_and_names_what_needs_each_tool(machine):
    env, _, _ = machine
    done = _check({**env, "OS_TOOLS_INSTALL": "no"}, "ensure")
    assert done.returncode == 2
    assert (
        "  - bubblewrap: `bwrap` is not installed (not on the search path); needed by every"
        " suite that runs a shell task" in done.stderr
    )
    assert "  - promtool: `promtool` is not installed" in done.stderr


def test_where_it_may_install_it_installs_with_apt_get_and_goes_on(machine):
    env, record, tools = machine
    done = _check(env, "ensure")
    assert done.returncode == 0, done.stderr
    calls = record.read_text().splitlines()
    assert calls[0] == "update -qq"
    assert calls[1] == "install -qq -y bubblewrap slirp4netns chromium faketime"
    assert calls[2] == "install -qq -y --no-install-recommends prometheus"
    assert calls[3] == "install -qq -y --no-install-recommends prometheus-alertmanager"
    assert {path.name for path in tools.iterdir()} == {
        "bwrap",
        "slirp4netns",
        "pgbouncer",
        "chromium",
        "promtool",
        "prometheus-alertmanager",
        "faketime",
    }
    assert MESSAGE not in done.stderr


def test_a_bubblewrap_that_cannot_run_is_reported_not_installed_again(machine):
    env, _, tools = machine
    _executable(
        tools / "bwrap",
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n",
    )
    done = _check({**env, "OS_TOOLS_INSTALL": "no"}, "ensure")
    assert done.returncode == 2
    assert "bubblewrap: installed at" in done.stderr
    assert "cannot create its namespaces here (bwrap: No permissions to create new namespace)" in (
        done.stderr
    )
    # apt-get cannot fix that one: it is not in the install command.
    assert "apt-get install -y slirp4netns chromium faketime" in done.stderr


def test_skip_os_suites_runs_on_and_says_what_skips(machine):
    env, record, _ = machine
    done = _check({**env, "OS_TOOLS_INSTALL": "no", "SKIP_OS_SUITES": "1"}, "ensure")
    assert done.returncode == 0
    assert MESSAGE not in done.stderr
    assert (
        "SKIP_OS_SUITES=1: the suites that need bubblewrap, slirp4netns, chromium, promtool,"
        " alertmanager" in done.stderr
    )
    assert not record.exists()


def test_a_suite_needing_a_missing_tool_skips_with_its_reason_and_is_listed(tmp_path):
    """The pytest side, as `make test SKIP_OS_SUITES=1` runs it: tests/run.py hands the
    missing tools to every pytest process; a marked test skips, the others run."""
    suite = "tests/scheduler_app/test_localstack_sandbox.py"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", "-rs", suite],
        cwd=ROOT,
        env={
            **_inherited_env(),
            "DJANGO_SETTINGS_MODULE": "project.settings.test",
            "SCHEDULER_OS_TOOLS_MISSING": json.dumps({"bubblewrap": "hidden by the test"}),
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "2 passed, 1 skipped" in out
    assert "needs the OS tool bubblewrap: hidden by the test" in out
    assert "skipped: these suites need OS tools this machine lacks" in out
    assert "bubblewrap (hidden by the test):" in out
    assert "tests/scheduler_app/ (1 tests): test_localstack_sandbox.py" in out


def _inherited_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
