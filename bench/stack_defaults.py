"""The stack a user starts, for every bench that starts one (`shell`, `ceiling`, `sustained`,
`burst`, `dag`, `failover`, `flow`): the one place that knows it.

By default a bench runs what `make run` runs: the beat's and the worker's commands read from
devstack/commands.py (the module `make run`'s launcher builds them with), the environment with
nothing of the bench's own process in it (so the product reads its own defaults: log level,
task events, fairness), and the tenant as `tenant_create` makes it (its model's default
quotas). tests/bench/test_stack_defaults.py checks these against the Makefile, the launcher
and docker-compose.yml.

Anything else is a departure: opt-in (`--departures=KEY[+KEY],...`: a comma separates rows,
a plus combines departures in one row), named, and reported as a row of its own beside the
default row ("shell 150/s, worker at WARNING (departure: log level)").
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from devstack.commands import LOCAL_WORKER_CONCURRENCY, beat_command, worker_command

ROOT = Path(__file__).resolve().parent.parent

# What the bench's own process sets for itself (bench/settings.py, support.service_env) and a
# default stack must not inherit: unset, the product reads its own default.
BENCH_ONLY_ENV = ("LOG_LEVEL", "CELERY_SEND_EVENTS", "FAIR_INFLIGHT_PER_TENANT")


@dataclass(frozen=True)
class Departure:
    key: str  # as given to --departures
    name: str  # the row's "(departure: NAME)"
    short: str  # what the row says was changed
    worker_options: tuple[tuple[str, ...], ...] = ()  # (option, value?) set on the worker
    beat_options: tuple[tuple[str, ...], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    raised_quotas: bool = False
    workers: tuple[int, int] | None = None  # (count, concurrency)


LOG_WARNING = Departure(
    "log-warning",
    "log level",
    "worker and beat at WARNING",
    worker_options=(("-l", "WARNING"),),
    beat_options=(("-l", "WARNING"),),
    env=(("LOG_LEVEL", "WARNING"),),
)
NO_GOSSIP = Departure(
    "no-gossip",
    "no gossip/mingle/heartbeat",
    "worker without gossip, mingle and heartbeat",
    worker_options=(("--without-gossip",), ("--without-mingle",), ("--without-heartbeat",)),
)
NO_EVENTS = Departure(
    "no-events", "no task events", "no task events", env=(("CELERY_SEND_EVENTS", "false"),)
)
RAISED_QUOTAS = Departure(
    "raised-quotas", "raised quotas", "tenant quotas raised to the load", raised_quotas=True
)
NO_FAIRNESS = Departure(
    "no-fairness", "fairness off", "fair dispatch off", env=(("FAIR_INFLIGHT_PER_TENANT", "0"),)
)
SCHEDULER_CLASS = Departure(
    "scheduler-class",
    "explicit scheduler class",
    "beat -S beat:LeaderScheduler",
    beat_options=(("-S", "beat:LeaderScheduler"),),
)
FIXED_LEAD = Departure(
    "fixed-lead",
    "fixed lead",
    "the beat's lead fixed at SCHEDULER_FIRE_AHEAD_SECONDS",
    env=(("SCHEDULER_FIRE_AHEAD_MAX_SECONDS", "0"),),
)
KNOWN = {
    d.key: d
    for d in (LOG_WARNING, NO_GOSSIP, NO_EVENTS, RAISED_QUOTAS, NO_FAIRNESS, SCHEDULER_CLASS)
}
KNOWN[FIXED_LEAD.key] = FIXED_LEAD
# What the benches used to run with, all at once: `--departures=old-bench`.
OLD_BENCH = (LOG_WARNING, NO_GOSSIP, NO_EVENTS, RAISED_QUOTAS, SCHEDULER_CLASS)


def workers(count: int, concurrency: int) -> Departure:
    """More workers, or another concurrency, than `make run`'s one worker of its default."""
    return Departure(
        f"workers-{count}x{concurrency}",
        "worker count/concurrency",
        f"{count}x{concurrency} workers (make run: 1x{LOCAL_WORKER_CONCURRENCY})",
        workers=(count, concurrency),
    )


Combo = tuple[Departure, ...]
DEFAULTS: Combo = ()


def _one(key: str) -> Departure:
    match = re.fullmatch(r"workers-(\d+)x(\d+)", key)
    if match:
        return workers(int(match.group(1)), int(match.group(2)))
    if key not in KNOWN:
        known = ", ".join([*KNOWN, "old-bench", "workers-NxC"])
        raise SystemExit(f"--departures: unknown departure {key!r} (known: {known})")
    return KNOWN[key]


def departure_rows(args: list[str]) -> list[Combo]:
    """The rows a bench runs: the defaults first, then each combination asked for with
    --departures (opt-in: a bench never departs on its own)."""
    rows: list[Combo] = [DEFAULTS]
    for arg in args:
        if arg.startswith("--departures="):
            for spec in filter(None, arg.split("=", 1)[1].split(",")):
                combo: list[Departure] = []
                for key in spec.split("+"):
                    combo += OLD_BENCH if key == "old-bench" else [_one(key)]
                rows.append(tuple(combo))
    return rows


def label(base: str, combo: Combo) -> str:
    """`base, defaults` or `base, what changed (departure: names)`."""
    if not combo:
        return f"{base}, defaults"
    shorts = ", ".join(d.short for d in combo)
    return f"{base}, {shorts} (departure: {', '.join(d.name for d in combo)})"


def _set_option(argv: list[str], option: tuple[str, ...]) -> list[str]:
    flag, *value = option
    if flag in argv:
        index = argv.index(flag)
        return [*argv[: index + 1], *value, *argv[index + 1 + len(value) :]]
    return [*argv, *option]


def worker_count_and_concurrency(combo: Combo) -> tuple[int, int]:
    for departure in combo:
        if departure.workers:
            return departure.workers
    return 1, LOCAL_WORKER_CONCURRENCY


def worker_argv(combo: Combo, *, name: str, include: str | None = None) -> list[str]:
    """`make run`'s worker command (without the interpreter: `support.spawn` adds it), its
    node name `name`, with the departures' options set."""
    _count, concurrency = worker_count_and_concurrency(combo)
    argv = worker_command(sys.executable, concurrency=concurrency, name=name)[1:]
    for departure in combo:
        for option in departure.worker_options:
            argv = _set_option(argv, option)
    if include:  # a bench's own Celery tasks beside the product's (bench dag's comparison)
        argv += ["--include", include]
    return argv


def beat_argv(combo: Combo) -> list[str]:
    argv = beat_command(sys.executable)[1:]
    for departure in combo:
        for option in departure.beat_options:
            argv = _set_option(argv, option)
    return argv


def stack_env(combo: Combo) -> dict[str, str | None]:
    """The environment overrides of a stack's processes: None unsets (the product's default)."""
    env: dict[str, str | None] = dict.fromkeys(BENCH_ONLY_ENV)
    for departure in combo:
        env.update(departure.env)
    return env


def raises_quotas(combo: Combo) -> bool:
    return any(departure.raised_quotas for departure in combo)


def tenant_quotas_for(combo: Combo, *, rate: int) -> None:
    """The bench tenant's quotas: its defaults, or with `raised-quotas` sized to ``rate``
    fires a second (10x over an hour)."""
    from bench import support
    from scheduler_app.models import Tenant

    tenant = support.bench_tenant()
    if raises_quotas(combo):
        Tenant.objects.filter(id=tenant.id).update(
            max_runs_per_hour=10 * rate * 3600, max_concurrent_runs=100_000
        )
    else:
        fields = {f.name: f.default for f in _quota_fields(Tenant)}
        Tenant.objects.filter(id=tenant.id).update(**fields)


def _quota_fields(tenant_model) -> list:
    return [f for f in tenant_model._meta.fields if f.name.startswith("max_") and f.has_default()]


def defaults_note() -> str:
    """What "defaults" means in a row, read from where the product keeps it."""
    from django.conf import settings

    from scheduler_app.models import Tenant

    quotas = ", ".join(f"{f.name} {f.default:,}" for f in _quota_fields(Tenant))
    return (
        "defaults = `make run`'s stack: worker `"
        + " ".join(worker_argv(DEFAULTS, name="NAME"))
        + "` (gossip, mingle, heartbeat and task events on), beat `"
        + " ".join(beat_argv(DEFAULTS))
        + f"` (scheduler class from CELERY_BEAT_SCHEDULER, {settings.CELERY_BEAT_SCHEDULER}),"
        f" LOG_LEVEL and FAIR_* unset (fairness FAIR_INFLIGHT_PER_TENANT"
        f" {settings.FAIR_INFLIGHT_PER_TENANT}), a tenant's default quotas ({quotas}), tasks"
        " made by the task service (support.tasks_create)"
    )


def image_user() -> tuple[str, int]:
    """The user the image's processes run as: the Dockerfile's USER, its uid from useradd."""
    text = (ROOT / "Dockerfile").read_text()
    user = re.findall(r"^USER\s+(\S+)", text, flags=re.MULTILINE)[-1]
    match = re.search(rf"useradd\b[^\n]*--uid\s+(\d+)[^\n]*\b{re.escape(user)}\b", text)
    if match is None:
        raise RuntimeError(f"the Dockerfile's USER {user} has no useradd --uid")
    return user, int(match.group(1))


def non_root_python() -> tuple[str, dict[str, str]]:
    """The interpreter of a worker run as the image's user, and the environment it needs:
    this bench's own, or BENCH_NON_ROOT_PYTHON where that one lies out of the user's reach
    (a virtualenv over an interpreter under a 0700 home): a CPython install the user can
    read, given this virtualenv's packages (PYTHONPATH) and its own prefix (PYTHONHOME, and
    lib/ for libpython)."""
    chosen = os.environ.get("BENCH_NON_ROOT_PYTHON")
    if not chosen:
        return sys.executable, {}
    prefix = Path(chosen).parent.parent
    packages = sysconfig.get_paths()["purelib"]
    return chosen, {
        "PYTHONHOME": str(prefix),
        "LD_LIBRARY_PATH": str(prefix / "lib"),
        "PYTHONPATH": f"{ROOT}{os.pathsep}{packages}",
    }


def run_as(uid: int) -> list[str]:
    """The command that runs what follows as ``uid`` (its group too, no other groups)."""
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


def start_worker(
    combo: Combo,
    *,
    name: str,
    log_name: str,
    run_as_uid: int | None = None,
    include: str | None = None,
    **env: str,
) -> list:
    """The stack's workers (one, or the `workers-NxC` departure's count), started by
    `support.spawn`; ``run_as_uid``: as that user (setpriv), as the image runs them."""
    from bench import support

    count, _concurrency = worker_count_and_concurrency(combo)
    overrides = {**stack_env(combo), **env}
    prefix: list[str] = []
    python = sys.executable
    if run_as_uid is not None:
        python, interpreter_env = non_root_python()
        overrides.update(interpreter_env)
        home = tempfile.mkdtemp(prefix="bench-worker-home-")
        atexit.register(shutil.rmtree, home, ignore_errors=True)
        os.chown(home, run_as_uid, run_as_uid)
        prefix = run_as(run_as_uid)
        overrides.update(HOME=home, SCHEDULER_VAR_DIR=home, PYTHONDONTWRITEBYTECODE="1")
    return [
        support.spawn(
            worker_argv(
                combo, name=f"{name}{index}@%h" if count > 1 else f"{name}@%h", include=include
            ),
            log_name=f"{log_name}{index}" if count > 1 else log_name,
            prefix=prefix,
            python=python,
            **overrides,
        )
        for index in range(count)
    ]


def start_beat(combo: Combo, *, log_name: str, **env: str):
    from bench import support

    return support.spawn(beat_argv(combo), log_name=log_name, **{**stack_env(combo), **env})


@contextlib.contextmanager
def in_process(combo: Combo, *, rate: int, log_name: str) -> Iterator[None]:
    """For a bench that plays the beat and the workers in its own process (`bench flow`):
    the tenant's quotas, the log level and fairness of the stack ``combo`` describes, the
    process's log lines in bench/results/logs/LOG_NAME.log as a worker's would be (the
    bench's own settings log at WARNING, to its terminal)."""
    import logging

    from django.conf import settings

    tenant_quotas_for(combo, rate=rate)
    env = {key: value for key, value in stack_env(combo).items() if value is not None}
    root = logging.getLogger()
    saved_level, saved_handlers = root.level, root.handlers[:]
    saved_fairness = settings.FAIR_INFLIGHT_PER_TENANT
    log_dir = ROOT / "bench" / "results" / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log_dir / f"{log_name}.log", mode="w")
    handler.setFormatter(logging.Formatter("[%(asctime)s: %(levelname)s/%(name)s] %(message)s"))
    root.handlers = [handler]
    # The product's default level is INFO (`make run`'s `-l INFO`, LOG_LEVEL unset).
    root.setLevel(env.get("LOG_LEVEL", "INFO"))
    settings.FAIR_INFLIGHT_PER_TENANT = int(
        env.get("FAIR_INFLIGHT_PER_TENANT", settings.FAIR_INFLIGHT_PER_TENANT)
    )
    try:
        yield
    finally:
        root.handlers, settings.FAIR_INFLIGHT_PER_TENANT = saved_handlers, saved_fairness
        root.setLevel(saved_level)
        handler.close()
