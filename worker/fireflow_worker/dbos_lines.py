"""DBOS's start-up lines that would mislead a reader of the worker's log, explained or left out.

- `Listening to 0 queues:` (and the `Queue: ...` lines under it): DBOS's queue thread lists the queues *it*
  polls when it starts, usually before the worker registered its queues; claiming on notification, the
  worker polls none through DBOS and claims its queues itself. The line is replaced by one saying so; the
  worker's `ready` line names what it serves.
- `To view and manage workflows, connect to DBOS Conductor at: ...`: an advert for DBOS's managed service,
  which this deployment does not use (the operator recovers departed workers' runs).
- `DBOS failed to launch:` with its traceback, and `Could not connect to postgres database to verify
  existence of ...`: the worker's own `cannot start:` line says the same in one sentence with the fix; at
  debug level (DBOS_LOG_LEVEL=DEBUG, `--debug`) they are shown.

Matched on the message texts of the pinned DBOS version (3.4.0); a changed text is simply shown again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

LISTENING_PREFIX = "Listening to "
QUEUE_PREFIX = "Queue: "
CONDUCTOR_ADVERT = "To view and manage workflows, connect to DBOS Conductor"
LAUNCH_FAILURES = ("DBOS failed to launch", "Could not connect to postgres database to verify existence")


class DbosStartLines(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        # The queues the worker claims itself (none when DBOS polls them); set before launch.
        self.claimed_queues: Sequence[str] = ()
        # False at debug level: DBOS's own account of a failed launch is shown beside the worker's.
        self.quiet_launch_failures = True
        # The thread listing DBOS's queues (its queue thread, once at start), while it lists them.
        self._listing_thread: int | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if not isinstance(record.msg, str):
            return True
        if record.msg.startswith(CONDUCTOR_ADVERT):
            return False
        if self.quiet_launch_failures and record.msg.startswith(LAUNCH_FAILURES):
            return False
        if record.thread == self._listing_thread:
            if record.msg.startswith(QUEUE_PREFIX):
                return False
            self._listing_thread = None
        if record.funcName == "log_queues" and record.msg.startswith(LISTENING_PREFIX):
            self._listing_thread = record.thread
            if not self.claimed_queues:
                return False  # DBOS polls the queues, registered after launch: the `ready` line lists them
            record.msg = (
                f"DBOS polls no queue of this worker: it claims {', '.join(self.claimed_queues)} itself when an "
                "enqueue is notified (FIREFLOW_CLAIM_ON_NOTIFY)"
            )
            record.args = ()
        return True


DBOS_START_LINES = DbosStartLines()
