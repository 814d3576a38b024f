"""A randomized nemesis (what Jepsen does to databases) for the scheduler: under load, a
seeded random schedule of faults (tests/chaos/faults.py) one after another, each logged with
its time, then the history checker (tests/chaos/history.py) over what the stack recorded.

The schedule is a pure function of the seed (`plan`): the same seed gives the same faults,
holds and gaps, so a failing seed is replayed by running it again (`make chaos SEED=...`).
What a fault picks at run time (which worker, the current leader) is drawn from a second
random seeded from the same seed; the leader it finds depends on the run.

The stack: two beats (one of them, `b`, under libfaketime so its wall clock can be stepped),
two supervised workers, a private Redis, and the broker reached through the drop proxy
(tests/redis_drop_proxy.py: passing everything until a fault drops pushes). A sampler
records, every quarter second, the pool processes of each worker, so the checker knows which
processes lived through the chaos unharmed (`survivors`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from django.conf import settings as django_settings

from beat.lock import LeaderLock
from scheduler_app.redis_client import get_redis
from tests.chaos.faults import FAULT_KINDS, Fault, libfaketime_path, process_group
from tests.chaos.harness import ChaosStack
from tests.pg_cluster import PgCluster
from tests.processes import ROOT
from tests.redis_drop_proxy import RedisDropProxy

# The gap between one fault's heal and the next fault: the stack may or may not have
# recovered by then (a fault landing on a recovery is part of the game).
GAP_RANGE = (1.0, 4.0)
# tests/chaos/faketime_site: Python 3.11's time.sleep under libfaketime 0.9.10.
FAKETIME_SITE = ROOT / "tests" / "chaos" / "faketime_site"


@dataclass(frozen=True)
class Step:
    at: float  # seconds from the nemesis' start
    kind: str
    hold: float


def plan(seed: int, *, seconds: float, kinds: list[type[Fault]], long: bool) -> list[Step]:
    """The faults of one run: a pure function of its arguments. They come in rounds, each
    round every kind once in a shuffled order (so a short run still meets every kind), with
    random holds and gaps."""
    rng = random.Random(seed)
    steps, at, round_ = [], round(rng.uniform(*GAP_RANGE), 1), []
    while at < seconds:
        if not round_:
            round_ = rng.sample(kinds, len(kinds))
        kind = round_.pop()
        hold = kind().hold(rng, long=long)
        steps.append(Step(at=at, kind=kind.kind, hold=hold))
        at = round(at + hold + rng.uniform(*GAP_RANGE), 1)
    return _partition_before_failover(steps)


def _partition_before_failover(steps: list[Step]) -> list[Step]:
    """A failover leaves the cluster without a standby, so a partition drawn after it has no
    link to cut: the first failover and the first partition swap places (with their holds;
    the gaps between steps stay) when the failover came first, so a run that draws both
    meets both."""
    kinds = [step.kind for step in steps]
    if "postgres-failover" not in kinds or "postgres-partition" not in kinds:
        return steps
    failover, partition = kinds.index("postgres-failover"), kinds.index("postgres-partition")
    if partition < failover:
        return steps
    gaps = [later.at - step.at - step.hold for step, later in itertools.pairwise(steps)]
    drawn = [(step.kind, step.hold) for step in steps]
    drawn[failover], drawn[partition] = drawn[partition], drawn[failover]
    out, at = [], steps[0].at
    for index, (kind, hold) in enumerate(drawn):
        out.append(Step(at=round(at, 1), kind=kind, hold=hold))
        if index < len(gaps):
            at = at + hold + gaps[index]
    return out


def faketime_env(clock_file: Path) -> dict[str, str]:
    """A process whose wall clock follows `clock_file` ("+30", "-30", "+0"), re-read each
    second; its monotonic clock is the real one. The site folder's sitecustomize works
    around libfaketime 0.9.10 failing Python 3.11's time.sleep (its absolute
    clock_nanosleep on the monotonic clock, libfaketime issue #426) when monotonic is not
    faked."""
    return {
        "LD_PRELOAD": libfaketime_path() or "",
        "FAKETIME_TIMESTAMP_FILE": str(clock_file),
        "FAKETIME_CACHE_DURATION": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "PYTHONPATH": f"{FAKETIME_SITE}:{ROOT}",
    }


@dataclass
class NemesisStack:
    stack: ChaosStack
    proxy: RedisDropProxy
    clock_file: Path | None
    clock_node: str = "b"
    beat_env: dict[str, dict[str, str]] = field(default_factory=dict)
    # tests/pg_cluster.py's primary and standby when the nemesis runs on them
    # (NEMESIS_POSTGRES=cluster, `make chaos`); None on the single test PostgreSQL.
    cluster: PgCluster | None = None

    def start_beat(self, node: str) -> None:
        self.stack.start_beat(node, **self.beat_env.get(node, {}))

    def set_clock_offset(self, seconds: int) -> None:
        assert self.clock_file is not None
        # Written whole, then renamed: libfaketime never reads half a line.
        partial = self.clock_file.with_suffix(".partial")
        partial.write_text(f"{seconds:+d}\n")
        partial.replace(self.clock_file)

    def leader_node(self) -> str | None:
        lock = LeaderLock(
            get_redis(),
            key_prefix=django_settings.SCHEDULER["REDIS_KEY_PREFIX"],
            node_id="nemesis",
            ttl_seconds=1.5,
        )
        with contextlib.suppress(Exception):  # Redis may be the fault
            leader = lock.current_leader()
            if leader and leader.node in self.stack.beats:
                return leader.node
        return None


@dataclass
class Event:
    at: float  # Unix time
    elapsed: float
    kind: str
    action: str  # inject | heal
    detail: dict


class PoolSampler:
    """Which pool processes each worker generation had, sampled; what lived to the end."""

    def __init__(self, stack: ChaosStack) -> None:
        self.stack = stack
        self.seen: dict[int, set[int]] = {}  # worker (main) pid -> pids of its group
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def sample(self) -> dict[int, set[int]]:
        now = {}
        for worker in list(self.stack.workers.values()):
            if worker.alive():
                now[worker.pid] = set(process_group(worker.pid))
                self.seen.setdefault(worker.pid, set()).update(now[worker.pid])
        return now

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            self.sample()

    def survivors(self, harmed: set[int]) -> set[int]:
        """Pool processes alive now, of workers never harmed (`harmed`: the pids the nemesis
        froze or killed); call before the stack stops."""
        self._stop.set()
        self._thread.join(timeout=5)
        alive = self.sample()
        return {
            pid
            for leader, pids in alive.items()
            if leader not in harmed and not (self.seen[leader] & harmed)
            for pid in pids
        }


class Nemesis:
    def __init__(self, target: NemesisStack, steps: list[Step], *, seed: int, log_path: Path):
        self.target = target
        self.steps = steps
        self.rng = random.Random(seed + 1)
        self.log_path = log_path
        self.events: list[Event] = []
        self.harmed: set[int] = set()
        self.kinds = {kind.kind: kind for kind in FAULT_KINDS}
        self._started = time.time()

    def log(self, kind: str, action: str, detail: dict) -> None:
        now = time.time()
        event = Event(now, round(now - self._started, 2), kind, action, detail)
        self.events.append(event)
        with self.log_path.open("a", encoding="utf-8") as file:
            file.write(json.dumps(asdict(event)) + "\n")
        self.target.stack.mark(f"nemesis {action} {kind} {detail}")

    def run(self) -> None:
        """Inject and heal each step at its time (the schedule is the fault: waiting for it is
        what the nemesis does), healing whatever is still in place on the way out."""
        self._started = time.time()
        self.target.stack.fault()
        for step in self.steps:
            time.sleep(max(0.0, self._started + step.at - time.time()))
            fault = self.kinds[step.kind]()
            detail = fault.inject(self.target, self.rng)
            self.harmed.update(detail.get("pids", ()))
            self.log(step.kind, "inject", {**detail, "hold": step.hold})
            try:
                time.sleep(step.hold)
            finally:
                self.log(step.kind, "heal", fault.heal(self.target))
        self.target.stack.heal()

    def fault_table(self) -> list[tuple[str, int, float]]:
        """(kind, times, seconds held) per kind."""
        rows = {}
        for step in self.steps:
            times, held = rows.get(step.kind, (0, 0.0))
            rows[step.kind] = (times + 1, held + step.hold)
        return [(kind, times, round(held, 1)) for kind, (times, held) in sorted(rows.items())]
