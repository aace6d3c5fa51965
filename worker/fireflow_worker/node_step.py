"""The body of one node's DBOS step: its events, its limits, and whatever the node does wrong turned into
that node's failure.

A node type is code the worker does not control (a `python` function, a plugin). Whatever it raises -
`SystemExit`, `KeyboardInterrupt`, any other `BaseException` - becomes a `NodeError` here, in the step's
thread: a `BaseException` that reached the event loop would close it and stall every run of the worker.

A node of a pure type (see `NodeType.pure`) is no step: `PureAttempts` makes its attempts in the workflow
itself, with the waits and the errors DBOS's retry loop would give its step, and the executor records only a
final failure (as the step it would have been), so a failed pure node reads like any other.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dbos import DBOS, StepOptions
from dbos import error as dbos_error
from sqlalchemy import exc as sa_exc

from fireflow_contract import events, logformat, telemetry
from fireflow_contract.run_request import EVENTS_STREAM
from fireflow_contract.telemetry import NO_TRACE, RunTrace
from fireflow_worker import metrics
from fireflow_worker.flows.nodetype import NodeContext, NodeError, parse_params, run_node_sized
from fireflow_worker.flows.registry import default_registry
from fireflow_worker.run_limits import OutputBudget, RunLimits, checked_output_size

# A run's error and its events carry one line; a node raising a megabyte of text must not store it.
MAX_MESSAGE_CHARS = 2000

IsCancelled = Callable[[str, bool], bool]


def now_ms() -> int:
    return int(time.time() * 1000)


def one_line(err: BaseException | str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """A message on one line, at most `limit` characters."""
    text = " ".join((err if isinstance(err, str) else str(err) or type(err).__name__).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(slots=True)
class NodeCall:
    """One node's step, as the workflow hands it over (step arguments are not stored: any object will do).
    Not frozen: a frozen dataclass's constructor costs a node several times as much."""

    run_id: str
    node_id: str
    node_type: str
    params: dict[str, Any]
    limits: RunLimits
    budget: OutputBudget
    is_cancelled: IsCancelled
    # Write this node's events to the run's stream as they happen (the run's `live` event detail).
    live: bool = False
    # The run's span, which this node's span is a child of (see telemetry.py).
    trace: RunTrace = NO_TRACE
    # DBOS may attempt the step more than once (its retry policy allows it): only then is the attempt asked.
    retried: bool = False

    def should_retry(self, err: BaseException) -> bool:
        """Failures another attempt cannot fix are not retried, and nothing is retried once the run is cancelled."""
        if isinstance(err, NodeError) and not err.retryable:
            return False
        return not self.is_cancelled(self.run_id, True)


class _DeferredSleep:
    """Collects a durable node's sleep requests inside its step; the workflow sleeps them afterwards."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, seconds: float) -> None:
        self.seconds += max(0.0, seconds)


def run_node_step(call: NodeCall) -> dict[str, Any]:
    """One attempt of a node: `{"output", "bytes"[, "attempt"][, "wake_at_ms", "started_at_ms"]}`, or a
    NodeError."""
    status = DBOS.step_status if call.retried else None
    attempt = 1 + (status.current_attempt or 0) if status is not None else 1
    # The step may run in a thread of DBOS's pool: what its lines are about is said again here. A failure
    # leaving the node's span marks it failed.
    with (
        logformat.step_context(call.run_id, call.node_id),
        telemetry.node_span(call.trace, call.node_id, call.node_type, attempt),
    ):
        return _attempt(call, attempt)


# DBOS's own cap on the wait between two attempts of a step.
MAX_RETRY_WAIT_SECONDS = 3600.0


class PureAttempts:
    """A pure node's attempts, made in the workflow: what DBOS's retry loop does for a step (the same waits,
    `should_retry`, and `DBOSMaxStepRetriesExceeded` once retries are exhausted), with no checkpoint."""

    def __init__(self, call: NodeCall, options: StepOptions) -> None:
        self._call = call
        self._name = str(options.get("name", call.node_id))
        self._retries = bool(options.get("retries_allowed"))
        self._attempts = int(options.get("max_attempts", 1)) if self._retries else 1
        self._interval = float(options.get("interval_seconds", 1.0))
        self._backoff = float(options.get("backoff_rate", 2.0))
        self._errors: list[Exception] = []
        self.attempt = 0

    def next(self) -> dict[str, Any] | float:
        """The node's record (as its step would return it), or the seconds to wait before the next attempt.
        Raises the node's failure: what DBOS would have recorded for its step."""
        self.attempt += 1
        try:
            with telemetry.node_span(self._call.trace, self._call.node_id, self._call.node_type, self.attempt):
                return _attempt(self._call, self.attempt, pure=True)
        except NodeError as err:
            if not self._retries:
                raise
            if not self._call.should_retry(err):
                raise
            self._errors.append(err)
            if self.attempt >= self._attempts:
                raise dbos_error.DBOSMaxStepRetriesExceeded(self._name, self._attempts, self._errors) from None
            return min(self._interval * self._backoff ** (self.attempt - 1), MAX_RETRY_WAIT_SECONDS)


def raise_recorded(failure: Exception) -> None:
    """The body of the step that records a pure node's final failure at the node's own step id."""
    raise failure


def _no_sleep(seconds: float) -> None:
    # A pure node is computed in the workflow and again on recovery: a sleep there would not be durable.
    raise NodeError("this node type is declared pure but sleeps: a type that sleeps must not be pure", retryable=False)


def _attempt(call: NodeCall, attempt: int, pure: bool = False) -> dict[str, Any]:
    if attempt > 1 and call.is_cancelled(call.run_id, True):
        # Raised past DBOS's retry loop and not recorded: a resumed run attempts this node afresh.
        raise dbos_error.DBOSWorkflowCancelledError(f"run {call.run_id} was cancelled; node {call.node_id} stops")
    node_type = default_registry().get(call.node_type)
    started = time.monotonic()
    if call.live:
        _write_event(events.node_started(call.node_id, call.node_type, attempt, now_ms()))
    deferred_sleep = _DeferredSleep()
    sleeper = _no_sleep if pure else deferred_sleep
    ctx = NodeContext(call.run_id, call.node_id, sleeper, attempt)
    try:
        output, size = run_node_sized(node_type, parse_params(node_type, call.params), ctx)
        size = checked_output_size(output, call.limits, size)
        call.budget.reserve(call.node_id, size)
    except dbos_error.DBOSWorkflowCancelledError:
        raise
    except BaseException as err:  # user code: everything it raises is this node's failure
        failure = err if isinstance(err, NodeError) else NodeError(f"{type(err).__name__}: {one_line(err)}")
        elapsed = time.monotonic() - started
        metrics.node_duration(call.node_type, "failed").observe(elapsed)
        if call.live:
            _write_event(
                events.node_failed(call.node_id, attempt, one_line(failure.message), round(elapsed * 1000), now_ms())
            )
        raise NodeError(one_line(failure.message), retryable=failure.retryable) from None
    elapsed = time.monotonic() - started
    metrics.node_duration(call.node_type, "succeeded").observe(elapsed)
    wake_at_ms = now_ms() + int(deferred_sleep.seconds * 1000) if deferred_sleep.seconds else None
    if call.live and not node_type.durable:
        # A durable node's `node.finished` is written by the workflow once its sleep is over.
        _write_event(node_finished_event(call.node_id, attempt, elapsed * 1000))
    # What the step records beside the output: its size (the run's budget, also on replay), the attempt
    # that succeeded when not the first, and a durable node's wake-up time and start.
    recorded: dict[str, Any] = {"output": output, "bytes": size}
    if attempt > 1:
        recorded["attempt"] = attempt
    if wake_at_ms is not None:
        recorded["wake_at_ms"] = wake_at_ms
        recorded["started_at_ms"] = now_ms() - int(elapsed * 1000)
    return recorded


def _write_event(event: events.Event) -> None:
    """A live event, from inside the node's step. The pool does not ping a connection before use, so the
    first write after a database restart may meet a dead one (SQLAlchemy then drops the pool's old
    connections): one more try on a fresh connection, then the event is lost rather than the node failed."""
    try:
        DBOS.write_stream(EVENTS_STREAM, event)
    except sa_exc.DBAPIError as err:
        if not err.connection_invalidated:
            raise
        DBOS.write_stream(EVENTS_STREAM, event)


def node_finished_event(node_id: str, attempt: int, duration_ms: float) -> events.Event:
    # Whole milliseconds, as the events derived from DBOS's records (`steps`) carry them.
    return events.node_finished(node_id, attempt, round(duration_ms), now_ms())
