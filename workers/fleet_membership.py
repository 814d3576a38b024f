"""A worker's life in the fleet, hooked on Celery's worker signals (main process only):

* setup: consume the worker's own sticky queue `worker.<hostname>` besides its tiers;
* ready: register, fail what a previous incarnation of this hostname left running, start
  the heartbeat thread (which also reaps dead peers);
* SIGTERM (warm shutdown): Celery stops taking messages and waits for running tasks; we
  mark the worker `draining` and arm a deadline: runs still going when it passes are
  released at once (back to queued, doorbell rung again) and their processes told to stop.
  PREEMPT_GRACE_SECONDS before the deadline (at once when the grace is at least the
  deadline: a spot instance's two minutes) the worker's runs are told they are preempted
  (`context.preempted`; a shell task gets SIGTERM), so a handler can checkpoint and stop, its
  run handed back at once (`workers.execute`), and the next attempt resumes from there;
* shutdown: a final heartbeat with state `gone`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time

import celery
import psutil
from celery.signals import celeryd_after_setup, worker_ready, worker_shutdown, worker_shutting_down
from django.conf import settings
from django.db import close_old_connections, connection

from runs.dead_workers import dead_workers_reap
from runs.lost import worker_runs_lose
from scheduler_app.fleet import registry
from scheduler_app.fleet.capabilities import capability_queues_to_consume, worker_capabilities
from scheduler_app.ringing.ring import ring
from scheduler_app.ringing.traces import RingReason
from scheduler_app.services.fleet import worker_executions_release
from scheduler_app.services.run_signals import abandon_request, preempt_clear, preempt_request
from workers.shell_sandbox import worker_sandbox_status

logger = logging.getLogger(__name__)

APP_VERSION = os.environ.get("APP_VERSION", "0.1.0")
# After releasing its runs, how long a draining worker waits for handlers to honour the
# stop before it kills its pool processes outright.
ABANDON_GRACE_SECONDS = 10.0


class Fleet:
    """The fleet membership of this worker process."""

    def __init__(self, *, hostname: str, queues: list[str], concurrency: int) -> None:
        interval = settings.FLEET["HEARTBEAT_SECONDS"]
        now = time.time()
        self.record = registry.WorkerRecord(
            hostname=hostname,
            queues=queues,
            concurrency=concurrency,
            version=f"{APP_VERSION} (celery {celery.__version__})",
            pid=os.getpid(),
            started_at=now,
            heartbeat_seconds=interval,
            last_heartbeat=now,
            capabilities=worker_capabilities(),
        )
        self._stop = threading.Event()
        self._process = psutil.Process()
        self._thread = threading.Thread(target=self._loop, name="fleet-heartbeat", daemon=True)
        self._deadline_thread: threading.Thread | None = None

    # -- registration and heartbeats ----------------------------------------------------
    def start(self) -> None:
        sandbox = worker_sandbox_status()
        self.record.shell_sandbox = sandbox.describe()
        if not sandbox.runs_shell_tasks:
            logger.error("shell sandbox %s: shell tasks will fail", sandbox.describe())
        elif sandbox.mode != "on":
            logger.warning("shell sandbox %s", sandbox.describe())

        registry.counters_reset(self.record.hostname)
        preempt_clear(worker_id=self.record.hostname)
        # Same hostname as a worker that died: whatever it held is lost, not ours.
        lost = worker_runs_lose(
            worker_id=self.record.hostname, reason="the worker restarted while running this"
        )
        if lost:
            logger.warning("re-queued %d runs left by a previous %s", lost, self.record.hostname)
        self.beat()
        self._thread.start()
        logger.info("fleet: registered %s on %s", self.record.hostname, self.record.queues)

    def beat(self) -> None:
        record = self.record
        record.last_heartbeat = time.time()
        counted = registry.counters_read(record.hostname)
        record.active_runs = counted.active_runs
        record.completed_last_minute = counted.completed_last_minute
        record.error_count = counted.error_count
        record.completed_last_hour = counted.completed_last_hour
        record.errors_last_hour = counted.errors_last_hour
        cpu, rss = self._usage()
        record.cpu_percent = cpu
        record.memory_rss_bytes = rss
        record.memory_percent = round(100.0 * rss / psutil.virtual_memory().total, 2)
        registry.worker_record_save(record)

    def _usage(self) -> tuple[float, int]:
        cpu = 0.0
        rss = 0
        for process in [self._process, *self._process.children(recursive=True)]:
            try:
                cpu += process.cpu_percent(interval=None)
                rss += process.memory_info().rss
            except psutil.Error:
                continue
        return round(cpu, 1), rss

    def _loop(self) -> None:
        interval = self.record.heartbeat_seconds
        while not self._stop.wait(interval):
            try:
                close_old_connections()
                self.beat()
                dead_workers_reap()
            except Exception:  # a blip must not end the heartbeats
                logger.exception("fleet heartbeat failed")
        connection.close()

    # -- graceful shutdown --------------------------------------------------------------
    def drain(self) -> None:
        if self.record.state == registry.STATE_DRAINING:
            return
        self.record.state = registry.STATE_DRAINING
        try:
            self.beat()
        except Exception:
            logger.exception("could not announce draining")
        deadline = settings.FLEET["SHUTDOWN_DEADLINE_SECONDS"]
        notice = max(0.0, deadline - settings.FLEET["PREEMPT_GRACE_SECONDS"])
        logger.info(
            "fleet: draining; running runs have %.0fs to finish, told they are preempted "
            "after %.0fs",
            deadline,
            notice,
        )
        self._deadline_thread = threading.Thread(
            target=self._release_after, args=(deadline, notice), name="fleet-drain", daemon=True
        )
        self._deadline_thread.start()

    def _release_after(self, deadline: float, notice: float) -> None:
        if self._stop.wait(notice):
            return
        try:
            preempt_request(worker_id=self.record.hostname)
        except Exception:  # Redis down: the deadline still hands the runs back
            logger.exception("could not tell the runs they are preempted")
        if self._stop.wait(deadline - notice):
            return
        try:
            released = self.release()
        finally:
            connection.close()
        if released and not self._stop.wait(ABANDON_GRACE_SECONDS):
            self._kill_pool()

    def release(self) -> int:
        """Give every run still held back to the queue and tell its process to stop."""

        close_old_connections()
        released = worker_executions_release(worker_id=self.record.hostname)
        if released:
            abandon_request(claim_tokens=[str(token) for _, token in released])
            ring([bell for bell, _ in released], reason=RingReason.RELEASED)
            logger.warning("fleet: released %d unfinished runs to other workers", len(released))
        return len(released)

    def _kill_pool(self) -> None:
        for child in self._process.children():
            logger.warning("fleet: killing pool process %s that ignored the stop", child.pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)

    def stop(self) -> None:
        self._stop.set()
        try:
            self.release()  # anything the pool left behind (normally nothing)
        except Exception:
            logger.exception("release at shutdown failed")
        self.record.state = registry.STATE_GONE
        try:
            self.beat()
        except Exception:
            logger.exception("final heartbeat failed")
        connection.close()
        logger.info("fleet: %s gone", self.record.hostname)


_fleet: Fleet | None = None


@celeryd_after_setup.connect
def _consume_sticky_queue(sender: str, instance, **kwargs) -> None:
    instance.app.amqp.queues.select_add(registry.sticky_queue_name(sender))


@celeryd_after_setup.connect
def _consume_capability_queues(sender: str, instance, **kwargs) -> None:
    """A worker that offers a capability only some have (a container runtime, egress) also
    takes the runs routed to it: `<tier>.container`, `<tier>.egress` for each tier it
    consumes. (A worker may consume capability queues alone: `-Q normal.egress`.)"""
    queues = instance.app.amqp.queues
    consumed = list(queues.consume_from or queues)
    for queue in capability_queues_to_consume(consumed, worker_capabilities()):
        queues.select_add(queue)


@worker_ready.connect
def _join_fleet(sender, **kwargs) -> None:
    global _fleet
    queues = sorted(queue.name for queue in sender.task_consumer.queues)
    _fleet = Fleet(
        hostname=sender.hostname,
        queues=queues,
        concurrency=int(getattr(sender.controller, "concurrency", 1) or 1),
    )
    try:
        _fleet.start()
    except Exception:
        logger.exception("fleet registration failed; the worker runs without a heartbeat")


@worker_shutting_down.connect
def _start_draining(sender, sig=None, how=None, exitcode=None, **kwargs) -> None:
    if _fleet is not None:
        # Off the signal handler: it touches Redis and starts a thread.
        threading.Thread(target=_fleet.drain, name="fleet-drain-start", daemon=True).start()


@worker_shutdown.connect
def _leave_fleet(sender, **kwargs) -> None:
    if _fleet is not None:
        _fleet.stop()
