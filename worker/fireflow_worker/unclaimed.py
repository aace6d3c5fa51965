"""`--follow` on a run no worker claims: one line after a few seconds saying so, then the wait goes on.

A run still ENQUEUED some seconds after its enqueue has been claimed by no worker: none serves its queue,
none runs the application version it goes to, or every one is busy. That is what the line says, read from
the run's own row (the truth, and one cheap read), not guessed from the database's connections.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TextIO

# Long enough for an idle worker to claim (milliseconds after the enqueue), short enough not to look hung.
UNCLAIMED_AFTER_SECONDS = 5.0


def unclaimed_line(run_id: str, queue: str, run_version: str | None, latest_version: str | None) -> str:
    """The one line (pure): which queue the run waits on and which workers could claim it."""
    head = f"no worker has claimed run {run_id} after {UNCLAIMED_AFTER_SECONDS:g} s on queue {queue}"
    if run_version is None and latest_version is None:
        return f"{head}: no worker of this application has started on this database yet; start one (fireflow-worker)"
    version = run_version or latest_version
    return (
        f"{head}: start a worker of application version {version!r} serving that queue (fireflow-worker), "
        "or wait for a busy one to free a slot; still waiting"
    )


class UnclaimedWatch:
    """After UNCLAIMED_AFTER_SECONDS, asks `waiting()` for the line to print (None: the run was claimed)."""

    def __init__(self, waiting: Callable[[], str | None], out: TextIO | None = None) -> None:
        self._waiting = waiting
        self._out = out or sys.stderr
        self._timer = threading.Timer(UNCLAIMED_AFTER_SECONDS, self._check)
        self._timer.daemon = True

    def start(self) -> UnclaimedWatch:
        self._timer.start()
        return self

    def cancel(self) -> None:
        self._timer.cancel()

    def _check(self) -> None:
        try:
            line = self._waiting()
        except Exception:  # the follower itself reports what the database does; a notice must not add to it
            return
        if line is not None:
            print(f"warning: {line}", file=self._out, flush=True)
