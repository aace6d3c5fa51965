"""Noticing that the worker's own machinery broke, so that Kubernetes restarts it instead of leaving a
worker that answers its probes and runs nothing.

A node can fail, never the worker (see `node_step`). But if DBOS's event loop stops, its thread pool shuts
down or its queue thread dies, every run claimed afterwards would stay PENDING while `/readyz` said 200.
The watchdog probes those parts once a second; the first problem found makes the worker not ready and
ends the process with a non-zero status. The runs it held stay PENDING under its executor id and the
restarted worker recovers them.

The probes read private attributes of DBOS, through `dbos_internals`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from dbos import DBOS

from fireflow_worker import dbos_internals

log = logging.getLogger("fireflow.worker")

Probe = Callable[[], str | None]
WATCHDOG_INTERVAL_SECONDS = 1.0


class MachineryWatchdog(threading.Thread):
    def __init__(
        self, probes: list[Probe], on_broken: Callable[[str], None], interval_seconds: float = WATCHDOG_INTERVAL_SECONDS
    ) -> None:
        super().__init__(name="machinery-watchdog", daemon=True)
        self._probes = probes
        self._on_broken = on_broken
        self._interval = interval_seconds
        self.stopped = threading.Event()

    def first_problem(self) -> str | None:
        for probe in self._probes:
            try:
                problem = probe()
            except Exception as err:  # a probe that cannot tell is not a broken worker
                log.debug("watchdog probe failed: %s", err)
                continue
            if problem is not None:
                return problem
        return None

    def run(self) -> None:
        while not self.stopped.wait(self._interval):
            problem = self.first_problem()
            if problem is not None and not self.stopped.is_set():
                self._on_broken(problem)
                return


def dbos_probes(dbos: DBOS) -> list[Probe]:
    """Probes of a launched DBOS instance: its event loop, its thread pool and its queue thread."""
    queue_threads = dbos_internals.queue_threads(dbos)

    def event_loop() -> str | None:
        loop, thread = dbos_internals.event_loop(dbos)
        if loop is None or loop.is_closed() or not loop.is_running() or thread is None or not thread.is_alive():
            return "DBOS's event loop is no longer running"
        return None

    def thread_pool() -> str | None:
        executor = dbos_internals.thread_pool(dbos)
        if executor is None:
            return "DBOS's thread pool is gone"
        try:
            executor.submit(int).result(timeout=30)
        except RuntimeError:
            return "DBOS's thread pool is shut down"
        return None

    def claiming() -> str | None:
        if any(not thread.is_alive() for thread in queue_threads):
            return "DBOS's queue thread stopped: no run would be claimed"
        return None

    return [event_loop, thread_pool, claiming]
