"""Sampling profiles of the stack's processes while a scenario measures (py-spy).

    with sampled({"workers": [pid, ...], "beat": [pid]}, name="ceiling-1250") as profile:
        ...  # the measured window
    result.notes += profile.notes

Each process is sampled with its subprocesses (a prefork worker's pool) at RATE_HZ,
without pausing it (`--nonblocking`): by default only threads holding the GIL (running
Python: where the CPU of the Python processes goes), or with ``idle`` every thread whose
stack passes through a given function (where a sequence's wall time goes, waits on
PostgreSQL and Redis included). Samples are grouped by where the innermost frame's code
lives (`area`), so the table says which layer a fire's CPU goes to: the project's own
modules by app, Django's ORM, the PostgreSQL and Redis clients, Celery/kombu/billiard, JSON,
logging, the rest of the standard library. The raw samples (flamegraph.pl's input) and a
markdown summary go to bench/results/profiles/.

Sampling costs CPU of its own (a py-spy process per sampled process): the figures of a
profiled run are for attribution, not for the scenario's targets.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.report import RESULTS_DIR

PROFILES_DIR = RESULTS_DIR / "profiles"  # raw samples (*.txt) stay out of git
CHECKOUT = str(Path(__file__).resolve().parent.parent)
RATE_HZ = 100
TOP_FUNCTIONS = 15
# The project's own top-level packages, each its own area.
PROJECT_PACKAGES = (
    "scheduler_app",
    "workers",
    "dags",
    "handler_contract",
    "budgets",
    "sandbox",
    "alerting",
    "data_lifecycle",
    "project",
)
# (how the file's path starts, relative to its sys.path entry; the area), the first that
# matches wins.
LIBRARY_AREAS = (
    ("django/db/", "Django ORM"),
    ("django/", "Django (other)"),
    ("psycopg", "psycopg (PostgreSQL client)"),
    ("redis/", "redis-py (Redis client)"),
    ("kombu/", "kombu"),
    ("celery/", "celery"),
    ("billiard/", "billiard (prefork pool)"),
    ("json/", "json"),
    ("logging/", "logging"),
    ("uuid.py", "uuid"),
    ("datetime.py", "datetime"),
    ("zoneinfo/", "datetime"),
    ("selectors.py", "stdlib: sockets and selectors"),
    ("socket.py", "stdlib: sockets and selectors"),
    ("ssl.py", "stdlib: sockets and selectors"),
    ("threading.py", "stdlib: threads"),
    ("subprocess.py", "stdlib: subprocess"),
)


def area(frame: str) -> str:
    """'func (path/to/file.py:123)' -> the layer that code belongs to."""
    path = _relative(frame)
    for start, name in LIBRARY_AREAS:
        if path.startswith(start):
            return name
    for package in PROJECT_PACKAGES:
        if path.startswith(f"{package}/"):
            return f"project: {package}"
    if path.startswith("bench/"):
        return "the bench itself"
    if "/" in path and not path.startswith("<"):
        return "other libraries"
    return "stdlib: other"


def _relative(frame: str) -> str:
    """The frame's file relative to its sys.path entry (py-spy gives it so, or absolute)."""
    where = frame[frame.rfind("(") + 1 :] if "(" in frame else frame
    path = where.rsplit(":", 1)[0]
    if path.startswith(f"{CHECKOUT}/"):
        return path[len(CHECKOUT) + 1 :]
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1]
    if "/lib/python" in path:
        return path.split("/lib/python", 1)[1].split("/", 1)[-1]
    return path


@dataclass
class Profile:
    name: str
    files: dict[str, list[Path]] = field(default_factory=dict)  # group -> raw sample files
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    # Waiting threads sampled too (where wall time goes, e.g. a chain's hop): then only the
    # stacks with `through` in them (a function's name, say) count.
    idle: bool = False
    through: str | None = None
    rate_hz: int = RATE_HZ

    def summarize(self) -> Path:
        """Write the markdown summary; fill `notes` with each group's top areas."""
        sampled = f"py-spy at {self.rate_hz} Hz over {self.seconds:.0f} s, subprocesses included,"
        if self.idle:
            what = (
                " waiting threads too (wall time, not CPU: a wait on PostgreSQL or Redis counts"
                f" for the frame that waits), only stacks through `{self.through}`."
            )
        else:
            what = (
                " only threads holding the GIL (running Python: system calls and waits on"
                f" PostgreSQL, Redis or the network left out); one sample = 1/{self.rate_hz} s of"
                " Python running. Areas are where the innermost Python frame's code lives."
            )
        lines = [f"# profile: {self.name}", "", sampled + what]
        for group, paths in self.files.items():
            counts = _read(paths, through=self.through)
            total = counts.total
            if not total:
                self.notes.append(f"profile {self.name}, {group}: no samples")
                continue
            lines += ["", f"## {group}: {total} samples"]
            lines += ["", "| area | share |", "|---|---|"]
            lines += [f"| {name} | {n / total:.1%} |" for name, n in counts.by_area.most_common()]
            for title, counter in (
                ("function (self time)", counts.by_function),
                ("project function (inclusive)", counts.by_project_function),
            ):
                lines += ["", f"| {title} | share |", "|---|---|"]
                lines += [
                    f"| `{name}` | {n / total:.1%} |"
                    for name, n in counter.most_common(TOP_FUNCTIONS)
                ]
            top = ", ".join(f"{name} {n / total:.0%}" for name, n in counts.by_area.most_common(6))
            self.notes.append(f"profile {self.name}, {group} ({total} samples): {top}")
        path = PROFILES_DIR / f"{self.name}.md"
        path.write_text("\n".join(lines) + "\n")
        return path


@dataclass
class _Counts:
    by_area: Counter[str] = field(default_factory=Counter)
    by_function: Counter[str] = field(default_factory=Counter)
    by_project_function: Counter[str] = field(default_factory=Counter)
    total: int = 0


def _read(paths: list[Path], *, through: str | None = None) -> _Counts:
    counts = _Counts()
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not (count.isascii() and count.isdigit()):
                continue
            if through is not None and through not in stack:
                continue
            frames = [frame for frame in stack.split(";") if not frame.startswith("process ")]
            if not frames:
                continue
            leaf, samples = frames[-1], int(count)
            counts.total += samples
            counts.by_area[area(leaf)] += samples
            counts.by_function[_short(leaf)] += samples
            project = {_short(f) for f in frames if area(f).startswith("project: ")}
            for name in project:
                counts.by_project_function[name] += samples
    return counts


def _short(frame: str) -> str:
    """'func (…/site-packages/pkg/mod.py:12)' -> 'func (pkg/mod.py)'."""
    return f"{frame.partition(' (')[0]} ({_relative(frame)})"


@contextlib.contextmanager
def sampled(
    groups: dict[str, list[int]],
    *,
    name: str,
    idle: bool = False,
    through: str | None = None,
    rate_hz: int = RATE_HZ,
) -> Iterator[Profile]:
    """Sample every pid of every group (with its subprocesses) for the block's duration;
    ``idle``: waiting threads too, counting only stacks through ``through`` (see Profile);
    ``rate_hz``: lower it when many processes are sampled (each sample costs CPU)."""
    # The virtualenv's own (requirements.txt), whether or not its bin/ is on PATH.
    beside = Path(sys.executable).parent / "py-spy"
    py_spy = str(beside) if beside.exists() else shutil.which("py-spy")
    if py_spy is None:
        raise RuntimeError("py-spy is not installed (requirements.txt has it)")
    PROFILES_DIR.mkdir(parents=True, exist_ok=True)
    profile = Profile(name=name, idle=idle, through=through, rate_hz=rate_hz)
    samplers: list[subprocess.Popen[bytes]] = []
    for group, pids in groups.items():
        for pid in pids:
            output = PROFILES_DIR / f"{name}-{group}-{pid}.txt"
            profile.files.setdefault(group, []).append(output)
            argv = [py_spy, "record", "--pid", str(pid), "--subprocesses", "--nonblocking"]
            argv += ["--rate", str(rate_hz), "--format", "raw", "--output", str(output)]
            # Without waits: only threads holding the GIL, i.e. running Python (a system
            # call releases it). py-spy's own idle test, read off a process it does not
            # pause, counts threads blocked on a socket as busy.
            argv.append("--idle" if idle else "--gil")
            samplers.append(
                subprocess.Popen(
                    argv,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
    started = time.monotonic()
    try:
        yield profile
    finally:
        profile.seconds = time.monotonic() - started
        for sampler in samplers:
            with contextlib.suppress(ProcessLookupError):
                sampler.send_signal(signal.SIGINT)  # py-spy writes its file and exits
        for sampler in samplers:
            try:
                sampler.wait(timeout=30)
            except subprocess.TimeoutExpired:
                sampler.kill()
                sampler.wait()
    profile.summarize()
