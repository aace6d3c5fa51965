"""Noticing that a run executing here was cancelled, so that it stops at once and frees its slot.

`DBOS.cancel_workflow` (what `fireflow cancel` calls) only marks the run CANCELLED in the database; a
workflow finds out at its next checkpoint. A run asleep in a durable `sleep` (up to 30 days) or waiting on a
long node has none coming, so it would keep its worker slot. One thread per worker therefore asks the
database, once per interval and only while runs are executing here, which of them are cancelled (one indexed
query through DBOS's pooled engine), and wakes those runs on their event loop.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

log = logging.getLogger("fireflow.worker")

CANCEL_POLL_SECONDS = 1.0
# Cancelled ids remembered for a node attempt that wakes up later (a retry waits up to an hour).
_REMEMBERED = 10_000

CancelledAmong = Callable[[Sequence[str]], set[str]]


class CancelWatcher(threading.Thread):
    def __init__(self, cancelled_among: CancelledAmong, interval_seconds: float = CANCEL_POLL_SECONDS) -> None:
        super().__init__(name="cancel-watcher", daemon=True)
        self._query = cancelled_among
        self._interval = interval_seconds
        self._watched: dict[str, Callable[[], None]] = {}
        self._cancelled: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        self.stopped = threading.Event()

    def watch(self, run_id: str, on_cancel: Callable[[], None]) -> None:
        """Call `on_cancel` (from this watcher's thread: it must be thread-safe, e.g. `Event.set` or a
        `loop.call_soon_threadsafe`) once the run is seen cancelled."""
        with self._lock:
            self._watched[run_id] = on_cancel

    def unwatch(self, run_id: str) -> None:
        with self._lock:
            self._watched.pop(run_id, None)

    def is_cancelled(self, run_id: str, ask_now: bool = False) -> bool:
        """Whether the run was seen cancelled; `ask_now` asks the database (a failing node's retry decision)."""
        with self._lock:
            if run_id in self._cancelled:
                return True
        if ask_now:
            try:
                found = self._query([run_id])
            except Exception:
                log.warning("cannot tell whether run %s was cancelled; carrying on", run_id, exc_info=True)
                return False
            self._remember(found)
            return run_id in found
        return False

    def poll_once(self) -> None:
        with self._lock:
            run_ids = list(self._watched)
        if not run_ids:
            return
        found = self._query(run_ids)
        self._remember(found)
        for run_id in found:
            with self._lock:
                watched = self._watched.pop(run_id, None)
            if watched is not None:
                try:
                    watched()
                except RuntimeError:  # the run's event loop closed meanwhile: it has ended anyway
                    log.debug("run %s ended before its cancellation was delivered", run_id)

    def run(self) -> None:
        failing = False
        while not self.stopped.wait(self._interval):
            try:
                self.poll_once()
            except Exception as err:
                # The database may be away; DBOS itself waits for it. Try again at the next interval, and
                # say so once per outage, not once a second.
                if not failing:
                    log.warning("cannot check for cancelled runs, retrying every %g s: %s", self._interval, err)
                failing = True
            else:
                if failing:
                    log.info("checking for cancelled runs again")
                failing = False

    def _remember(self, run_ids: set[str]) -> None:
        with self._lock:
            for run_id in run_ids:
                self._cancelled[run_id] = None
                self._cancelled.move_to_end(run_id)
            while len(self._cancelled) > _REMEMBERED:
                self._cancelled.popitem(last=False)
