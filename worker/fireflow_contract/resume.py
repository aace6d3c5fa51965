"""How an ended run runs again (pure): the rule `fireflow resume` (the worker's client) and `kubectl fireflow
runs resume` (the operator's plugin) share; each does the I/O through DBOS's client.

A cancelled run, or one DBOS gave up recovering, resumes under its own id at its first unfinished node. A failed
run's failure is recorded, so it is forked instead: a new run (a new id) that keeps every step recorded before
its first failed node and runs from that node on. Either goes back onto the queue its request named.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fireflow_contract.run_request import TERMINAL_STATUSES

RESUMED_IN_PLACE = ("CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")


class NotResumableError(ValueError):
    """Why a run cannot run again, in one sentence; `ended` is False for a run that has not ended yet (a cancel
    would end it: the caller names its own command)."""

    def __init__(self, message: str, *, ended: bool = True) -> None:
        super().__init__(message)
        self.ended = ended


def resumes_in_place(run_id: str, status: str) -> bool:
    """True: resume the run under its own id; False: fork it from `fork_step`. A run that succeeded or has not
    ended is refused."""
    if status == "SUCCESS":
        raise NotResumableError(f"run {run_id} succeeded; there is nothing to resume")
    if status not in TERMINAL_STATUSES:
        raise NotResumableError(f"run {run_id} is {status}; only an ended run can be resumed", ended=False)
    return status in RESUMED_IN_PLACE


def fork_step(run_id: str, steps: Iterable[Mapping[str, Any]], error: str | None = None) -> int:
    """The step a failed run is forked from: its first failed node's (`steps`: DBOS's `list_workflow_steps`).
    A run that failed outside any node would fail again, and is refused (`error`: its error, to say why)."""
    failed = [int(step["function_id"]) for step in steps if step["error"] is not None]
    if not failed:
        why = f" ({error})" if error else ""
        raise NotResumableError(f"run {run_id} failed outside any node{why}; it would fail again: enqueue a new run")
    return min(failed)
