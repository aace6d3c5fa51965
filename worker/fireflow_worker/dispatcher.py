"""Claiming runs when there is work, instead of polling every queue every 50 ms.

DBOS polls each queue it serves on a fixed interval, and one poll costs the database seven statements and
two commits whether anything is queued or not (a reload of the queue's row and a four-statement claim): an
idle worker serving the four queues at 50 ms costs ~450 statements/s, and every replica adds as much. The
worker therefore tells DBOS to poll none of its queues (`DBOS.listen_queues([])`) and claims them itself,
with DBOS's own claim (`start_queued_workflows`) and dispatch (`execute_dequeued_workflow`, after
`run_encodings` made the run's encoding one DBOS reads), when:

- a run is enqueued or re-enqueued on the queue (a trigger notifies `ff-enqueued::<queue>`; an enqueue that
  commits wakes the worker within a few milliseconds);
- every free slot was taken and a polling interval has passed (a check in memory: a slot freed here);
- the queue's row changed (`ff-queue::<queue>`: concurrency, polling interval - the row is reloaded);
- with a global cap (DBOS_QUEUE_CONCURRENCY), a run ended anywhere (`ff-run-ended`) while the last claim
  stopped at the cap (the trigger announces only the ends of a capped queue's runs: each notification wakes
  every worker's listener thread, which then competes for the interpreter's lock with the runs there);
- DBOS's listener reconnected (after a database outage): notifications sent while it was away are lost;
- and, as a safety net, every `safety_poll_seconds`: a run enqueued with a delay, and anything else missed.

The notifications travel on DBOS's own channel and reach the claimers through DBOS's LISTEN connection (its
map of waiters, keyed by payload): no connection of the worker's own, and no second listening backend for
PostgreSQL to wake on every notification.

Claims of one queue are still spaced at least the queue's polling interval apart, as DBOS spaces its polls,
so a burst of enqueues costs what polling would and never more. One thread per queue claims, exactly as
DBOS's queue thread would (never two at once, so the worker concurrency holds).

The claim, the dispatch and the listener's map of waiters are private to DBOS: they are reached through
`dbos_internals`. Without LISTEN (local mode on SQLite) DBOS polls the queues itself, at their interval.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable

from dbos import DBOS

from fireflow_worker import dbos_internals, run_encodings
from fireflow_worker.dbos_internals import LoadedQueue, NotificationCallback
from fireflow_worker.schema import ENQUEUED_PREFIX, QUEUE_CHANGED_PREFIX, RUN_ENDED

log = logging.getLogger("fireflow.worker")

# How long a claimer waits after a failed claim (the database away) before it tries again.
RECONNECT_SECONDS = 1.0
# How long a dispatched run that never started (DBOS refused it) still counts against the worker's slots.
STARTING_FORGOTTEN_SECONDS = 30.0
# How often the safety poll also reloads the queue's row (changes are otherwise notified).
RELOAD_EVERY_SAFETY_POLLS = 10
# How often DBOS's listening connection is looked at (in memory) to notice that it reconnected.
LISTENER_CHECK_SECONDS = 0.5


class QueueClaimer(threading.Thread):
    """Claims runs of one queue whenever woken (or every `safety_poll_seconds`), at most once per polling
    interval, and hands them to DBOS to execute."""

    def __init__(self, dbos: DBOS, queue_name: str, safety_poll_seconds: float, stopped: threading.Event) -> None:
        super().__init__(name=f"claim-{queue_name}", daemon=True)
        self._dbos = dbos
        self.queue_name = queue_name
        self._safety = safety_poll_seconds
        self._stopped = stopped
        self._wake = threading.Event()
        self._reload = True
        self._queue: LoadedQueue | None = None
        # Every slot of this worker is taken: it looks (in memory, no database) for a freed one at this time.
        # Not woken by each run's end: a woken thread competes for the interpreter's lock with every run here.
        self._full_until: float | None = None
        # The last claim met a global limit (the queue's cap): a run ending anywhere may make room.
        self._capped = False
        # Runs handed to DBOS that have not started yet: DBOS counts a run as active only once its thread
        # runs, so without these a claim right after another could take the same free slots twice.
        self._starting: dict[str, float] = {}
        self._starting_lock = threading.Lock()
        self.claims = 0

    def run_started(self, run_id: str) -> None:
        with self._starting_lock:
            self._starting.pop(run_id, None)

    def wake(self, reload: bool = False) -> None:
        """Claim now (at the polling interval's pace). While every slot is taken, a wake changes nothing the
        next look for a freed slot would not see, so the thread sleeps on."""
        if reload:
            self._reload = True
        if reload or self._full_until is None:
            self._wake.set()

    def interrupt(self) -> None:
        self._wake.set()

    def run_ended(self) -> None:
        if self._capped:
            self._wake.set()

    def run(self) -> None:
        last_claim = 0.0
        safety_polls = 0
        next_safety = time.monotonic() + self._safety
        while not self._stopped.is_set():
            wake_at = next_safety if self._full_until is None else min(next_safety, self._full_until)
            self._wake.wait(max(0.0, wake_at - time.monotonic()))
            self._wake.clear()
            if self._stopped.is_set():
                return
            if time.monotonic() >= next_safety:  # the safety poll, busy or not; every tenth reloads the row
                next_safety = time.monotonic() + self._safety
                safety_polls += 1
                if safety_polls % RELOAD_EVERY_SAFETY_POLLS == 0:
                    self._reload = True
            try:
                queue = self._load_queue()
                if self._room(queue) == 0:  # looked at again a polling interval later, as DBOS would poll
                    if self._full_until is None or time.monotonic() >= self._full_until:
                        self._full_until = time.monotonic() + queue.polling_interval_sec
                    continue
                self._full_until = None
                # Space claims at least one polling interval apart, as DBOS spaces its polls.
                wait = last_claim + queue.polling_interval_sec - time.monotonic()
                if wait > 0 and self._stopped.wait(wait):
                    return
                self._wake.clear()  # what woke us meanwhile is covered by the claim below
                last_claim = time.monotonic()
                self._claim(queue)
            except Exception as err:
                if not self._stopped.is_set():
                    log.warning("cannot claim runs of %s, retrying: %s", self.queue_name, _one_line(err))
                    self._reload = True
                    self._stopped.wait(RECONNECT_SECONDS)

    def _room(self, queue: LoadedQueue) -> int | None:
        """Free slots of this worker on the queue (None: no per-worker limit)."""
        limit = queue.worker_concurrency
        if limit is None:
            return None
        running = dbos_internals.running_on_queue(self._dbos, self.queue_name)
        return max(0, int(limit) - running - self._not_started())

    def _not_started(self) -> int:
        """Runs dispatched but not started (one that never starts - DBOS refused it - is forgotten in a while)."""
        expired = time.monotonic() - STARTING_FORGOTTEN_SECONDS
        with self._starting_lock:
            for run_id in [run_id for run_id, since in self._starting.items() if since < expired]:
                del self._starting[run_id]
            return len(self._starting)

    def _load_queue(self) -> LoadedQueue:
        if self._reload or self._queue is None:
            latest = dbos_internals.load_queue(self._dbos, self.queue_name)
            if latest is None:
                raise RuntimeError(f"queue {self.queue_name} is not registered")
            self._queue = latest
            self._reload = False
        return self._queue

    def _claim(self, queue: LoadedQueue) -> None:
        """One claim, exactly as DBOS's queue thread makes it for a queue without partitions."""
        budget = self._room(queue)
        running = dbos_internals.running_on_queue(self._dbos, self.queue_name) + self._not_started()
        owner_xid = dbos_internals.new_owner_xid()
        claimed, stop_reason = dbos_internals.claim(self._dbos, queue, running, owner_xid)
        self.claims += 1
        if budget is not None and len(claimed) >= budget:
            self._full_until = time.monotonic() + queue.polling_interval_sec
        self._capped = stop_reason is not None
        if not claimed:
            return
        found = dbos_internals.claimed_runs(self._dbos, claimed)
        now = time.monotonic()
        with self._starting_lock:
            self._starting.update(dict.fromkeys(claimed, now))
        for run_id in claimed:
            try:
                status = found.get(run_id) or dbos_internals.claimed_run(self._dbos, run_id)
                if status is None:
                    raise RuntimeError("its status row is gone")
                if run_encodings.execute_claimed(self._dbos, status, owner_xid) is None:
                    self.run_started(run_id)  # it ended at once (an encoding the worker cannot read)
            except Exception as err:
                self.run_started(run_id)  # it never will
                log.error("cannot start run %s: %s", run_id, _one_line(err))


class Dispatcher:
    """The claimers of the served queues, woken through DBOS's own LISTEN connection."""

    def __init__(self, dbos: DBOS, queue_names: list[str], safety_poll_seconds: float) -> None:
        self.stopped = threading.Event()
        self._dbos = dbos
        self.claimers = {name: QueueClaimer(dbos, name, safety_poll_seconds, self.stopped) for name in queue_names}
        self._signals: list[tuple[str, NotificationCallback]] = []
        self._listener_watch = threading.Thread(target=self._watch_listener, name="claim-listener", daemon=True)

    def start(self) -> Dispatcher:
        for name, claimer in self.claimers.items():
            self._listen(ENQUEUED_PREFIX + name, claimer.wake)
            self._listen(QUEUE_CHANGED_PREFIX + name, functools.partial(claimer.wake, reload=True))
            claimer.start()
            claimer.wake()  # claim what is already queued (runs recovered at launch among them)
        self._listen(RUN_ENDED, self._any_run_ended)
        self._listener_watch.start()
        return self

    def _watch_listener(self) -> None:
        """Wake every claimer when DBOS's listener has a new connection: what was notified while it had none
        (a database outage, a dropped connection) is lost, and waiting for the safety poll would leave those
        runs queued for up to its interval."""
        seen = dbos_internals.listener_connection(self._dbos)
        while not self.stopped.wait(LISTENER_CHECK_SECONDS):
            current = dbos_internals.listener_connection(self._dbos)
            if current is seen or current is None:
                continue
            seen = current
            dbos_internals.wait_until_listening(self._dbos)
            log.info("DBOS's listener reconnected: claiming what may have been enqueued meanwhile")
            for claimer in self.claimers.values():
                claimer.wake(reload=True)

    def stop(self) -> None:
        self.stopped.set()
        for key, signal in self._signals:
            dbos_internals.unlisten(self._dbos, key, signal)
        for claimer in self.claimers.values():
            claimer.interrupt()  # out of its wait, to see `stopped`

    def _listen(self, key: str, callback: Callable[[], None]) -> None:
        """Have DBOS's listener call `callback` when a notification with this payload arrives."""
        self._signals.append((key, dbos_internals.listen(self._dbos, key, callback)))

    def run_ended(self, queue_name: str) -> None:
        """A run ended here. Its request names its queue when our client enqueued it; when it does not, any
        claimer that stopped at its limit may have room now."""
        claimer = self.claimers.get(queue_name)
        for each in [claimer] if claimer is not None else self.claimers.values():
            each.run_ended()

    def run_started(self, run_id: str) -> None:
        """A run started here (DBOS counts it as active from now on)."""
        for claimer in self.claimers.values():
            claimer.run_started(run_id)

    def _any_run_ended(self) -> None:
        """A run ended somewhere: under a global cap, a slot may have been freed."""
        for claimer in self.claimers.values():
            claimer.run_ended()

    def problem(self) -> str | None:
        """What is broken, for the watchdog: a claimer that stopped."""
        if self.stopped.is_set():
            return None
        dead = [name for name, claimer in self.claimers.items() if not claimer.is_alive()]
        if dead:
            return f"the claim thread of {dead[0]} stopped: no run of it would be claimed"
        if self._listener_watch.ident is not None and not self._listener_watch.is_alive():
            return "the listener watch stopped: runs enqueued during a database outage would wait for the safety poll"
        return None


def _one_line(err: BaseException) -> str:
    return " ".join((str(err) or type(err).__name__).split())[:500]
