"""Workers run supervised, as compose (`restart: unless-stopped`) and Kubernetes run them:
one that exits is started again with the same name and settings.

Tests that take Redis away need it: Celery 5.7's worker exits on its own when Redis goes
away (a failover, a restart) while it holds unacknowledged messages (kombu, closing the dead
connection, restores them through a connection that no longer exists: "Unrecoverable error:
AttributeError ... 'hostname'"), and when Redis refuses an acknowledgement at maxmemory
("Unrecoverable error: server:OutOfMemoryError"). The supervisor is what brings it back, in
production too; the runs it held are reaped when their lease expires and retried.
"""

from __future__ import annotations

import threading

from tests.processes import ServiceProcess, start_worker, stop_all


class WorkerSupervisor:
    def __init__(self) -> None:
        self.workers: dict[str, ServiceProcess] = {}
        self.restarts = 0
        self._specs: dict[str, dict] = {}
        self._unsupervised: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, name: str, *, wait: bool = True, **spec) -> ServiceProcess:
        """`start_worker(name=name, wait=wait, **spec)`, and keep it running."""
        self._specs[name] = spec
        self.workers[name] = start_worker(name=name, wait=wait, **spec)
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, daemon=True)
            self._thread.start()
        return self.workers[name]

    def kill(self, name: str) -> None:
        """SIGKILL a worker for good (its node is gone): it stays dead."""
        self._unsupervised.add(name)
        self.workers[name].kill()

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            for name, worker in list(self.workers.items()):
                if name in self._unsupervised or worker.alive() or self._stop.is_set():
                    continue
                self.workers[name] = start_worker(name=name, wait=False, **self._specs[name])
                self.restarts += 1

    def stop_watching(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def stop(self) -> None:
        self.stop_watching()
        stop_all(self.workers.values())
