"""The operating-system tools the test suites drive, and `make test`'s check for them.

`make test` (and so `.ci/run`, which calls it) runs `python3 -m scripts.os_tools ensure`
before anything else, with the machine's own Python: no virtualenv is needed yet, so a
machine that lacks a tool hears it within seconds, not after the install. What it does:

- every tool present (and bubblewrap able to create its namespaces): nothing, exit 0;
- some missing, and this process may install (root, or passwordless sudo, and `apt-get`):
  installs their Debian packages the way CI always did, then checks again;
- still missing: ONE message naming them and the command that installs them, exit 2; or,
  with `SKIP_OS_SUITES=1`, a warning and exit 0: the suites marked
  `@pytest.mark.needs_os_tool(<tool>)` then skip, each saying why (`tests/os_suites.py`),
  and the end of the run lists them.

Environment:
- `SKIP_OS_SUITES=1`: run without the missing tools instead of stopping.
- `OS_TOOLS_INSTALL=no`: never install (the tests of this check use it, so they never run
  apt; an operator may too). Default `auto`.
- `OS_TOOLS_PATH`: the folders to search instead of the defaults below (tests hide tools so).
- `CHROMIUM_PATH`: where the browser tests find Chromium (default: `chromium` on the search
  path, which Debian puts at /usr/bin/chromium).

Standard library only: it runs before `.venv` exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

# Where the worker itself looks for bwrap and slirp4netns (sandbox/tools.py,
# tool_path): system folders only, never $PATH, which could put another program in the
# sandbox's place. Debian installs pgbouncer in /usr/sbin, which a user's PATH lacks.
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"

EXIT_MISSING = 2


@dataclass(frozen=True)
class Tool:
    name: str  # what the suites' markers name: needs_os_tool("bubblewrap")
    command: str
    package: str  # Debian's
    needed_by: str
    # Searched in SYSTEM_PATH only (as the worker does), not on $PATH first.
    system_only: bool = False
    # apt-get options for this package alone: prometheus' recommends are a whole server.
    apt_options: tuple[str, ...] = ()


TOOLS: tuple[Tool, ...] = (
    Tool(
        "bubblewrap",
        "bwrap",
        "bubblewrap",
        "every suite that runs a shell task, in the shell sandbox",
        system_only=True,
    ),
    Tool(
        "slirp4netns",
        "slirp4netns",
        "slirp4netns",
        "the shell sandbox's egress network",
        system_only=True,
    ),
    Tool("pgbouncer", "pgbouncer", "pgbouncer", "the transaction-pooling suite"),
    Tool("chromium", "chromium", "chromium", "the browser tests (Playwright)"),
    Tool(
        "promtool",
        "promtool",
        "prometheus",
        "the alert rules' promtool unit tests",
        apt_options=("--no-install-recommends",),
    ),
    # Debian's package ships `prometheus-alertmanager` (the server) and `amtool`.
    Tool(
        "alertmanager",
        "prometheus-alertmanager",
        "prometheus-alertmanager",
        "the Alertmanager configuration's amtool check and its end-to-end delivery test",
        apt_options=("--no-install-recommends",),
    ),
    # The nemesis steps one beat's wall clock with the library (LD_PRELOAD), which the
    # package installs next to the command (tests/chaos/faults.py, libfaketime_path).
    Tool("faketime", "faketime", "faketime", "the chaos nemesis' clock step (libfaketime)"),
)
TOOLS_BY_NAME = {tool.name: tool for tool in TOOLS}


def search_path(tool: Tool) -> str:
    override = os.environ.get("OS_TOOLS_PATH")
    if override is not None:
        return override
    if tool.system_only:
        return SYSTEM_PATH
    return os.pathsep.join(p for p in (os.environ.get("PATH", ""), SYSTEM_PATH) if p)


def tool_location(name: str) -> str | None:
    """The executable the suites will run for `name`, or None when there is none."""
    tool = TOOLS_BY_NAME[name]
    if name == "chromium" and os.environ.get("CHROMIUM_PATH"):
        chromium = os.environ["CHROMIUM_PATH"]
        return chromium if os.access(chromium, os.X_OK) else None
    return shutil.which(tool.command, path=search_path(tool))


def _bubblewrap_problem(bwrap: str) -> str | None:
    """None when bwrap can create the namespaces the sandbox asks for. Installed is not
    enough: a container's seccomp profile or a kernel without unprivileged user namespaces
    refuses them, and every shell run would then fail with `sandbox_unavailable`."""
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true"]
    try:
        probe = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"installed at {bwrap} but cannot start: {error}"
    if probe.returncode == 0:
        return None
    said = (probe.stderr.strip().splitlines() or [f"exit status {probe.returncode}"])[-1]
    return (
        f"installed at {bwrap} but cannot create its namespaces here ({said}): allow "
        "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; in a "
        "container, a seccomp profile that permits them)"
    )


def missing_tools() -> dict[str, str]:
    """{tool name: why the suites cannot use it}, for every tool they cannot."""
    missing: dict[str, str] = {}
    for tool in TOOLS:
        location = tool_location(tool.name)
        if location is None:
            where = (
                "CHROMIUM_PATH"
                if tool.name == "chromium" and os.environ.get("CHROMIUM_PATH")
                else "the search path"
            )
            missing[tool.name] = f"`{tool.command}` is not installed (not on {where})"
        elif tool.name == "bubblewrap":
            problem = _bubblewrap_problem(location)
            if problem:
                missing[tool.name] = problem
    return missing


def install_command(names: list[str]) -> list[list[str]]:
    """The apt-get commands that install these tools' packages (as CI always has)."""
    plain = [TOOLS_BY_NAME[n].package for n in names if not TOOLS_BY_NAME[n].apt_options]
    commands = [["apt-get", "install", "-y", *plain]] if plain else []
    for name in names:
        tool = TOOLS_BY_NAME[name]
        if tool.apt_options:
            commands.append(["apt-get", "install", "-y", *tool.apt_options, tool.package])
    return commands


def _installer_prefix() -> list[str] | None:
    """How this process may run apt-get: [] as root, ["sudo", "-n"] with passwordless
    sudo; None when it may not (or `OS_TOOLS_INSTALL=no`, or no apt-get here)."""
    if os.environ.get("OS_TOOLS_INSTALL", "auto").strip().lower() in ("no", "never", "0"):
        return None
    if shutil.which("apt-get") is None:
        return None
    if os.geteuid() == 0:
        return []
    sudo = shutil.which("sudo")
    if sudo is None:
        return None
    allowed = subprocess.run([sudo, "-n", "true"], capture_output=True, timeout=10, check=False)
    return [sudo, "-n"] if allowed.returncode == 0 else None


def _install(names: list[str], prefix: list[str]) -> None:
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print(f"make test: installing {', '.join(names)} (apt-get)", flush=True)
    subprocess.run([*prefix, "apt-get", "update", "-qq"], env=environment, check=False)
    for command in install_command(names):
        command = [*command[:2], "-qq", *command[2:]]
        subprocess.run([*prefix, *command], env=environment, check=False)


def missing_message(missing: dict[str, str]) -> str:
    names = list(missing)
    # A tool that is there but cannot run (bubblewrap without user namespaces) is not
    # fixed by apt-get; its line says what is.
    installable = [name for name, why in missing.items() if "not installed" in why]
    sudo = "" if os.geteuid() == 0 else "sudo "
    lines = [
        f"make test: the test suites need {len(names)} operating-system tool(s) this "
        f"machine cannot give them: {', '.join(names)}.",
        *(
            f"  - {name}: {why}; needed by {TOOLS_BY_NAME[name].needed_by}"
            for name, why in missing.items()
        ),
    ]
    if installable:
        lines.append("Install them (Debian/Ubuntu) and run `make test` again:")
        lines.append(f"    {sudo}apt-get update")
        lines += [f"    {sudo}{' '.join(command)}" for command in install_command(installable)]
    lines += [
        "Or run everything else now, the suites that need them skipped and listed at the end:",
        "    make test SKIP_OS_SUITES=1",
    ]
    return "\n".join(lines)


def ensure() -> int:
    missing = missing_tools()
    if missing and (prefix := _installer_prefix()) is not None:
        installable = [n for n, why in missing.items() if "not installed" in why]
        if installable:
            _install(installable, prefix)
            missing = missing_tools()
    if not missing:
        return 0
    if os.environ.get("SKIP_OS_SUITES") == "1":
        print(
            "make test: SKIP_OS_SUITES=1: the suites that need "
            f"{', '.join(missing)} skip (listed at the end of the run):",
            file=sys.stderr,
        )
        for name, why in missing.items():
            print(f"  - {name}: {why}", file=sys.stderr)
        return 0
    print(missing_message(missing), file=sys.stderr)
    return EXIT_MISSING


def main(argv: list[str]) -> int:
    if argv == ["ensure"]:
        return ensure()
    if argv == ["check"]:
        missing = missing_tools()
        for name, why in missing.items():
            print(f"{name}: {why}")
        return EXIT_MISSING if missing else 0
    print("usage: python3 -m scripts.os_tools ensure|check", file=sys.stderr)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
