"""Whether this host can run the sandbox (``probe_bubblewrap``), and what a worker does with
shell tasks (``SandboxStatus``): the operator's mode, on or off, and whether it works here.

Pure Python, no Django: the worker passes the mode in (`workers.shell_sandbox`).
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass

from .argv import sandboxed_argv
from .files import SandboxFiles
from .profile import NETWORK_NONE
from .rlimits import gate_sets_limits
from .tools import DEFAULT_BWRAP, tool_path

MODE_ON = "on"
MODE_OFF = "off"
MODES = (MODE_ON, MODE_OFF)


@dataclass(frozen=True)
class SandboxStatus:
    """What this worker does with shell tasks; ``detail`` says why, for readiness and logs."""

    mode: str  # "on" or "off"
    available: bool
    detail: str

    @property
    def runs_shell_tasks(self) -> bool:
        return self.mode == MODE_OFF or self.available

    def describe(self) -> str:
        if self.mode == MODE_OFF:
            return "off (WORKER_SHELL_SANDBOX=off): shell tasks run unsandboxed"
        if self.available:
            return f"on ({self.detail})"
        return f"unavailable: {self.detail}"


# A failed probe is tried again after this long (a start-up failure may be transient, e.g.
# EAGAIN under load); a working sandbox is remembered for the life of the process.
PROBE_RETRY_SECONDS = 30.0
_probed: dict[tuple[tuple[int, int] | None, str], tuple[SandboxStatus, float]] = {}


def probe_bubblewrap(
    run_as: tuple[int, int] | None = None, bwrap_name: str = DEFAULT_BWRAP
) -> SandboxStatus:
    """Start one sandbox with this very profile (``true`` inside), once per process.

    Being installed is not enough: user namespaces may be disabled by sysctl, by a container
    runtime's seccomp or AppArmor profile, or by a pod's security context, and bwrap then
    fails at start-up. Only running it tells.
    """
    key = (run_as, bwrap_name)
    known = _probed.get(key)
    if known is not None and (known[0].available or time.monotonic() < known[1]):
        return known[0]
    status = _probe(run_as, bwrap_name)
    _probed[key] = (status, time.monotonic() + PROBE_RETRY_SECONDS)
    return status


def _probe(run_as: tuple[int, int] | None, bwrap_name: str) -> SandboxStatus:
    bwrap = tool_path(bwrap_name)
    if bwrap is None:
        return SandboxStatus(MODE_ON, False, f"bubblewrap ({bwrap_name}) is not installed")
    if not gate_sets_limits(run_as) and tool_path("prlimit") is None:
        return SandboxStatus(MODE_ON, False, "prlimit (util-linux) is not installed")

    with SandboxFiles(network=NETWORK_NONE, upstream=None) as files:
        argv = sandboxed_argv(["true"], limits=[], files=files, run_as=run_as, bwrap=bwrap)
        try:
            probe = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=10,
                env={"PATH": "/usr/bin:/bin"},
                pass_fds=files.fds(),
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as error:
            return SandboxStatus(MODE_ON, False, f"bwrap could not be started: {error}")
    if probe.returncode != 0:
        reason = probe.stderr.decode("utf-8", "replace").strip().splitlines()
        message = reason[-1] if reason else f"exit code {probe.returncode}"
        return SandboxStatus(
            MODE_ON,
            False,
            f"bwrap cannot create its namespaces here ({message}); user namespaces are "
            "probably disabled for this process",
        )
    return SandboxStatus(MODE_ON, True, f"bubblewrap at {bwrap}")


def sandbox_status(
    mode: str, run_as: tuple[int, int] | None = None, bwrap_name: str = DEFAULT_BWRAP
) -> SandboxStatus:
    if mode == MODE_OFF:
        return SandboxStatus(MODE_OFF, tool_path(bwrap_name) is not None, "")
    return probe_bubblewrap(run_as, bwrap_name)
