"""The Python API to enqueue runs, follow, cancel and resume them: what the `fireflow` command uses.

A flow is validated, and the run's inputs checked against it, before anything is enqueued: a bad flow is
a `FlowValidationError` and nothing reaches the queue.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dbos import DBOSClient, WorkflowSerializationFormat
from dbos import error as dbos_error

from fireflow_contract import queues, resume, run_request, telemetry
from fireflow_contract.run_request import EVENTS_STREAM, TERMINAL_STATUSES, WORKFLOW_NAME
from fireflow_worker.flow_store import FlowNotFoundError, load_flow_definition, save_flow
from fireflow_worker.flows.validate import FlowValidationError, load_flow, validate_run_inputs
from fireflow_worker.run_events import Deriver, Step

# How often a follower of a run without live events reads its records (two indexed reads each time).
DERIVED_POLL_SECONDS = 0.1


class RunNotFoundError(LookupError):
    """No run has this id."""


class RunStateError(RuntimeError):
    """The run is not in a state that allows what was asked (cancel a finished run, resume a running one)."""


class RunCancelledError(RuntimeError):
    """The run was cancelled (it may be resumed)."""


class RunAbandonedError(RuntimeError):
    """The run's worker died every time it ran it, so DBOS stopped recovering it (it may be resumed)."""


@dataclass(frozen=True)
class RunStatus:
    run_id: str
    status: str
    flow_queue: str | None
    executor_id: str | None
    app_version: str | None
    output: Any
    # One readable line for every run that did not succeed (a failure, a cancellation, an abandoned run).
    error: str | None


def _abandoned_message(run_id: str, dispatches: int | None) -> str:
    times = f"{dispatches - 1} times" if dispatches else "too many times"
    return (
        f"run {run_id} was abandoned: its worker ended {times} while running it (FIREFLOW_MAX_RECOVERY_ATTEMPTS); "
        "a node may crash or exhaust its worker. `fireflow resume` tries it again"
    )


class FireflowClient:
    """Enqueue, follow, cancel and resume FireFlow runs on one executions database."""

    def __init__(self, database_url: str, *, application_name: str = "fireflow") -> None:
        self._database_url = database_url
        # LISTEN on, so stream readers wake on DBOS's notification instead of polling once a second.
        self._dbos = DBOSClient(
            system_database_url=database_url, application_name=application_name, use_listen_notify=True
        )

    def close(self) -> None:
        self._dbos.destroy()

    def __enter__(self) -> FireflowClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def save_flow(self, name: str, definition: dict[str, Any]) -> None:
        """Validate and store a flow so that runs can name it."""
        load_flow(definition)
        save_flow(self._database_url, name, definition)

    def enqueue(
        self,
        flow: dict[str, Any] | None = None,
        *,
        flow_ref: str | None = None,
        inputs: dict[str, Any] | None = None,
        queue: str = queues.EXECUTIONS,
        run_id: str | None = None,
        events: str | None = None,
        traceparent: str | None = None,
    ) -> str:
        """Validate and enqueue one run, by value (`flow`) or by reference (`flow_ref`); returns its id.

        `events` is the run's event detail (`steps` or `live`, see `run_events`); None leaves it to the queue.
        `traceparent` (W3C Trace Context) is the trace the run's spans continue; None: the caller's current
        OpenTelemetry span, if any (see telemetry.py).
        """
        if (flow is None) == (flow_ref is None):
            raise ValueError("give exactly one of flow and flow_ref")
        if events is not None and events not in run_request.EVENT_DETAILS:
            raise ValueError(f"unknown event detail {events!r}; known: {', '.join(run_request.EVENT_DETAILS)}")
        if queue not in queues.ALL_QUEUES:
            raise ValueError(f"unknown queue {queue!r}; known: {', '.join(queues.ALL_QUEUES)}")
        if flow_ref is not None:
            try:
                parsed = load_flow(load_flow_definition(self._database_url, flow_ref))
            except FlowNotFoundError as err:
                raise FlowValidationError([str(err)]) from None
        else:
            assert flow is not None
            parsed = load_flow(flow)
        checked_inputs = validate_run_inputs(parsed, inputs or {})
        request = run_request.build_request(
            flow=flow,
            flow_ref=flow_ref,
            inputs=checked_inputs,
            queue=queue,
            events=events,
            trace_context={run_request.TRACEPARENT: traceparent} if traceparent else telemetry.current_traceparent(),
        )
        # Portable JSON: the run's input, result, error and events are then readable by every DBOS SDK.
        handle: Any = self._dbos.enqueue(
            {
                "queue_name": queue,
                "workflow_name": WORKFLOW_NAME,
                "workflow_id": run_id or str(uuid.uuid4()),
                "serialization_type": WorkflowSerializationFormat.PORTABLE,
            },
            request,
        )
        return str(handle.get_workflow_id())

    def events(
        self, run_id: str, *, timeout_seconds: float | None = None, poll_seconds: float = DERIVED_POLL_SECONDS
    ) -> Iterator[dict[str, Any]]:
        """The run's events as they happen, until the run ends (see `run_events` for the two details).

        A run with `live` events is read from its stream; otherwise the events are derived from the run's
        records, read every `poll_seconds`. `timeout_seconds` bounds the wait for each event
        (DBOSStreamTimeoutError).
        """
        request = self._request(run_id)
        if run_request.event_detail(request) == run_request.LIVE_DETAIL:
            yield from self._dbos.read_stream(run_id, EVENTS_STREAM, timeout_seconds=timeout_seconds)
            return
        deriver = Deriver(request)
        waited_since = time.monotonic()
        while not deriver.ended:
            status = self._dbos.retrieve_workflow(run_id).get_status()
            steps = [Step.of(info) for info in self._dbos.list_workflow_steps(run_id)]
            error = None if status.error is None else str(status.error)
            started_at = getattr(status, "dequeued_at", None)
            now = int(time.time() * 1000)
            fresh = deriver.update(str(status.status), started_at, status.updated_at, error, steps, now)
            yield from fresh
            if fresh:
                waited_since = time.monotonic()
            elif timeout_seconds is not None and time.monotonic() - waited_since > timeout_seconds:
                raise dbos_error.DBOSStreamTimeoutError(run_id, EVENTS_STREAM, timeout_seconds)
            if not deriver.ended:
                time.sleep(poll_seconds)

    def _request(self, run_id: str) -> Any:
        """The run's request as enqueued (its first argument); RunNotFoundError when there is no such run."""
        found = self._dbos.list_workflows(workflow_ids=[run_id], load_input=True, load_output=False)
        if not found:
            raise RunNotFoundError(f"there is no run {run_id!r}")
        return run_request.request_in(found[0].input)

    def result(self, run_id: str, *, timeout_seconds: float | None = None) -> Any:
        """Wait for the run to end and return its result.

        Raises the run's error when it failed, RunCancelledError, RunAbandonedError, or TimeoutError when
        `timeout_seconds` pass first.
        """
        if timeout_seconds is not None:
            self.wait(run_id, timeout_seconds=timeout_seconds)
        try:
            return self._dbos.retrieve_workflow(run_id).get_result(polling_interval_sec=0.1)
        except dbos_error.DBOSAwaitedWorkflowCancelledError:
            raise RunCancelledError(f"run {run_id} was cancelled") from None
        except dbos_error.DBOSAwaitedWorkflowMaxRecoveryAttemptsExceeded:
            raise RunAbandonedError(self.status(run_id).error) from None

    def wait(self, run_id: str, *, timeout_seconds: float) -> RunStatus:
        """The run's status once it has ended; TimeoutError when it has not within `timeout_seconds`."""
        deadline = time.monotonic() + timeout_seconds
        pause = 0.05
        while True:
            status = self.status(run_id)
            if status.status in TERMINAL_STATUSES:
                return status
            if time.monotonic() >= deadline:
                raise TimeoutError(f"run {run_id} is still {status.status} after {timeout_seconds} s")
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def status(self, run_id: str) -> RunStatus:
        try:
            status = self._dbos.retrieve_workflow(run_id).get_status()
        except dbos_error.DBOSNonExistentWorkflowError:
            raise RunNotFoundError(f"there is no run {run_id!r}") from None
        error = None if status.error is None else str(status.error)
        if status.status == "CANCELLED":
            error = f"run {run_id} was cancelled"
        elif status.status == "MAX_RECOVERY_ATTEMPTS_EXCEEDED":
            error = _abandoned_message(run_id, getattr(status, "recovery_attempts", None))
        return RunStatus(
            run_id=run_id,
            status=str(status.status),
            flow_queue=status.queue_name,
            executor_id=status.executor_id,
            app_version=status.app_version,
            output=status.output,
            error=error,
        )

    def latest_version(self) -> str | None:
        """DBOS's latest application version on this database (the one version-less runs go to); None: no
        worker of this application has ever started here."""
        try:
            return str(self._dbos.get_latest_application_version()["version_name"])
        except dbos_error.DBOSException:
            return None

    def cancel(self, run_id: str) -> RunStatus:
        """Cancel a queued or running run: it ends CANCELLED at once, its running node is not retried."""
        status = self.status(run_id)
        if status.status == "CANCELLED":
            return status
        if status.status in TERMINAL_STATUSES:
            raise RunStateError(f"run {run_id} already ended with {status.status}; there is nothing to cancel")
        self._dbos.cancel_workflow(run_id)
        return self.status(run_id)

    def resume(self, run_id: str) -> str:
        """Run a cancelled, abandoned or failed run again from where it stopped; returns the id that runs.

        A cancelled or abandoned run resumes under its own id at its first unfinished node. A failed run's
        failure is recorded, so it is forked instead: a new run (new id) that keeps every step recorded
        before the first failed node and runs from that node on.
        """
        status = self.status(run_id)
        try:
            in_place = resume.resumes_in_place(run_id, status.status)
            queue = run_request.queue_of(self._request(run_id))
            start = None
            if not in_place:  # its steps' outputs are loaded with their errors (DBOS reads both or neither)
                start = resume.fork_step(run_id, self._dbos.list_workflow_steps(run_id), status.error)
        except resume.NotResumableError as err:
            raise RunStateError(str(err)) from None
        if start is None:
            self._dbos.resume_workflow(run_id, queue_name=queue)
            return run_id
        handle: Any = self._dbos.fork_workflow(run_id, start, queue_name=queue)
        return str(handle.get_workflow_id())
