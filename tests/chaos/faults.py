"""The nemesis' fault kinds (tests/chaos/nemesis.py draws from them): each a small class
that injects one fault into a running stack and heals it, and says what it did.

A kind is pluggable: subclass `Fault`, give it a `kind`, the seconds it is held for
(`hold`, drawn from its range by the nemesis' seeded random), `inject` and `heal`, and add it
to `FAULT_KINDS`; `applicable` says when the stack has what it needs (a second beat, the
faketime library). What `inject` and `heal` return is logged with the time (the nemesis log,
which the history checker reads: the pool processes a fault froze or killed).
"""

from __future__ import annotations

import contextlib
import glob
import os
import random
import signal
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from tests.chaos.nemesis import NemesisStack


def libfaketime_path() -> str | None:
    """Debian's libfaketime (package `faketime`), or None."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    return found[0] if found else None


def process_group(leader: int) -> list[int]:
    """The live processes of `leader`'s process group: a prefork worker and its pool."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{entry}/stat", "rb") as file:
                fields = file.read().rsplit(b")", 1)[1].split()
            if int(fields[2]) == leader and fields[0] not in (b"Z", b"X"):
                members.append(int(entry))
    return sorted(members)


class Fault:
    kind: ClassVar[str]
    hold_range: ClassVar[tuple[float, float]] = (2.0, 6.0)
    long_hold_range: ClassVar[tuple[float, float]] = (5.0, 20.0)

    def applicable(self, stack: NemesisStack) -> bool:
        return True

    def hold(self, rng: random.Random, *, long: bool) -> float:
        low, high = self.long_hold_range if long else self.hold_range
        return round(rng.uniform(low, high), 1)

    def inject(self, stack: NemesisStack, rng: random.Random) -> dict:
        raise NotImplementedError

    def heal(self, stack: NemesisStack) -> dict:
        return {}


class WorkerKill(Fault):
    """SIGKILL a worker and its pool; its supervisor starts it again (as compose would)."""

    kind = "worker-sigkill"

    def inject(self, stack, rng):
        name = rng.choice(sorted(stack.stack.workers))
        worker = stack.stack.workers[name]
        pids = process_group(worker.pid)
        worker.kill(signal.SIGKILL)
        return {"worker": name, "pids": pids}


class WorkerPause(Fault):
    """SIGSTOP a worker and its pool (a VM paused, a long GC), SIGCONT at the heal: longer
    than its heartbeats, so the fleet declares it dead and its runs are reaped meanwhile."""

    kind = "worker-sigstop"

    def inject(self, stack, rng):
        name = rng.choice(sorted(stack.stack.workers))
        worker = stack.stack.workers[name]
        self._worker = worker
        pids = process_group(worker.pid)
        worker.kill(signal.SIGSTOP)
        return {"worker": name, "pids": pids}

    def heal(self, stack):
        self._worker.kill(signal.SIGCONT)
        return {"pid": self._worker.pid}


class BeatKill(Fault):
    """SIGKILL the leading beat (the standby takes over); started again at the heal."""

    kind = "beat-sigkill"
    hold_range = (1.0, 4.0)
    long_hold_range = (2.0, 10.0)

    def applicable(self, stack):
        return len(stack.stack.beats) >= 2

    def inject(self, stack, rng):
        self._node = stack.leader_node() or rng.choice(sorted(stack.stack.beats))
        stack.stack.beats[self._node].kill(signal.SIGKILL)
        return {"beat": self._node}

    def heal(self, stack):
        stack.start_beat(self._node)
        return {"beat": self._node, "pid": stack.stack.beats[self._node].pid}


class BeatPause(Fault):
    """SIGSTOP the leading beat past its lock's TTL: the standby takes over, and the woken
    one must find it lost the lock before it fires again."""

    kind = "beat-sigstop"

    def applicable(self, stack):
        return len(stack.stack.beats) >= 2

    def inject(self, stack, rng):
        self._node = stack.leader_node() or rng.choice(sorted(stack.stack.beats))
        stack.stack.beats[self._node].kill(signal.SIGSTOP)
        return {"beat": self._node}

    def heal(self, stack):
        stack.stack.beats[self._node].kill(signal.SIGCONT)
        return {"beat": self._node}


class RedisRestartEmpty(Fault):
    """SIGKILL Redis, start it again empty on the same port at the heal: the queues, the
    leader lock and the registry are gone; PostgreSQL holds every run."""

    kind = "redis-restart-empty"
    hold_range = (1.0, 4.0)
    long_hold_range = (2.0, 10.0)

    def inject(self, stack, rng):
        stack.stack.redis.kill()
        return {"port": stack.stack.redis.port}

    def heal(self, stack):
        stack.stack.redis.start()
        return {"port": stack.stack.redis.port}


class BrokerDrops(Fault):
    """Half the broker's pushes lost on the way (tests/redis_drop_proxy.py)."""

    kind = "broker-drops-50pct"
    hold_range = (3.0, 8.0)
    long_hold_range = (10.0, 30.0)

    def inject(self, stack, rng):
        self._before = stack.proxy.dropped
        stack.proxy.drop(0.5)
        return {"fraction": 0.5}

    def heal(self, stack):
        stack.proxy.drop(0)
        return {"dropped": stack.proxy.dropped - self._before}


class ClockStep(Fault):
    """Step one beat's wall clock by +30 s or -30 s (libfaketime, re-read from its file each
    second), stepped back at the heal; its monotonic clock is left alone (an NTP step moves
    the wall clock only)."""

    kind = "beat-clock-step"
    hold_range = (5.0, 12.0)
    long_hold_range = (10.0, 40.0)

    def applicable(self, stack):
        return stack.clock_file is not None

    def inject(self, stack, rng):
        step = rng.choice((30, -30))
        stack.set_clock_offset(step)
        return {"beat": stack.clock_node, "step_seconds": step}

    def heal(self, stack):
        stack.set_clock_offset(0)
        return {"beat": stack.clock_node, "step_seconds": 0}


class PostgresPartition(Fault):
    """The replication link between the PostgreSQL primary and its synchronous standby cut
    (tests/pg_cluster.py's proxy), healed at the end: commits wait for the standby meanwhile
    (RPO zero over availability); nothing is lost or doubled when it heals. On the cluster
    only (NEMESIS_POSTGRES=cluster), and only while the primary is the first one."""

    kind = "postgres-partition"
    hold_range = (2.0, 5.0)
    long_hold_range = (5.0, 15.0)

    def applicable(self, stack):
        return stack.cluster is not None

    def inject(self, stack, rng):
        if stack.cluster.promoted_at is not None:
            self._cut = False  # the link led to the lost primary: nothing left to cut
            return {"skipped": "standby already promoted"}
        self._cut = True
        stack.cluster.cut_replication()
        return {"link_port": stack.cluster.link.port}

    def heal(self, stack):
        if self._cut:
            stack.cluster.heal_replication()
        return {"healed": self._cut}


class PostgresFailover(Fault):
    """The PostgreSQL primary SIGKILLed, its standby promoted at the heal (the hold is the
    time an operator, or CloudNativePG, takes to decide): in-flight transactions fail and are
    retried on the new primary, the gap's fires are caught up. Once: after it the cluster has
    no standby, so a later draw of this kind does nothing."""

    kind = "postgres-failover"
    hold_range = (2.0, 5.0)
    long_hold_range = (3.0, 10.0)

    def applicable(self, stack):
        return stack.cluster is not None

    def inject(self, stack, rng):
        if stack.cluster.killed_at is not None:
            self._killed = False
            return {"skipped": "primary already lost once"}
        self._killed = True
        stack.cluster.kill_primary()
        return {"primary_port": stack.cluster.primary.port}

    def heal(self, stack):
        if not self._killed:
            return {"promoted": False}
        promoted_at = stack.cluster.promote()
        # This process's own connection (the checker's reads) went with the old primary.
        from scheduler_app.db_retry import connection_discard

        connection_discard()
        return {"promoted": True, "after_kill_s": round(promoted_at - stack.cluster.killed_at, 1)}


FAULT_KINDS: tuple[type[Fault], ...] = (
    WorkerKill,
    WorkerPause,
    BeatKill,
    BeatPause,
    RedisRestartEmpty,
    BrokerDrops,
    ClockStep,
    PostgresPartition,
    PostgresFailover,
)
