"""The Python API to enqueue runs and follow them: what `fireflow run` and `fireflow status` use.

A flow is validated, and the run's inputs checked against it, before anything is enqueued: a bad flow is
a `FlowValidationError` and nothing reaches the queue.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dbos import DBOSClient

from fireflow_worker import queues
from fireflow_worker.engine import EVENTS_STREAM, WORKFLOW_NAME
from fireflow_worker.flow_store import FlowNotFoundError, load_flow_definition, save_flow
from fireflow_worker.flows.document import DocumentError, parse_text
from fireflow_worker.flows.validate import FlowValidationError, load_flow, validate_run_inputs


def read_flow_file(path: str | Path) -> dict[str, Any]:
    """Parse a YAML or JSON flow file into its definition (validated later, as a whole)."""
    try:
        data = parse_text(Path(path).read_text())
    except DocumentError as err:
        raise FlowValidationError([f"{path}: {err}"]) from None
    if not isinstance(data, dict):
        raise FlowValidationError([f"{path}: a flow must be a mapping, got {type(data).__name__}"])
    return data


@dataclass(frozen=True)
class RunStatus:
    run_id: str
    status: str
    flow_queue: str | None
    executor_id: str | None
    app_version: str | None
    output: Any
    error: str | None


class FireflowClient:
    """Enqueue and follow FireFlow runs on one executions database."""

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
    ) -> str:
        """Validate and enqueue one run, by value (`flow`) or by reference (`flow_ref`); returns its id."""
        if (flow is None) == (flow_ref is None):
            raise ValueError("give exactly one of flow and flow_ref")
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
        request: dict[str, Any] = {"inputs": checked_inputs, "queue": queue}
        if flow_ref is not None:
            request["flow_ref"] = flow_ref
        else:
            request["flow"] = flow
        handle: Any = self._dbos.enqueue(
            {"queue_name": queue, "workflow_name": WORKFLOW_NAME, "workflow_id": run_id or str(uuid.uuid4())},
            request,
        )
        return str(handle.get_workflow_id())

    def events(self, run_id: str, *, timeout_seconds: float | None = None) -> Iterator[dict[str, Any]]:
        """The run's node events as they happen, until the run ends."""
        yield from self._dbos.read_stream(run_id, EVENTS_STREAM, timeout_seconds=timeout_seconds)

    def result(self, run_id: str) -> Any:
        """Wait for the run to end and return its result (raises the run's error if it failed)."""
        return self._dbos.retrieve_workflow(run_id).get_result(polling_interval_sec=0.1)

    def status(self, run_id: str) -> RunStatus:
        status = self._dbos.retrieve_workflow(run_id).get_status()
        return RunStatus(
            run_id=run_id,
            status=str(status.status),
            flow_queue=status.queue_name,
            executor_id=status.executor_id,
            app_version=status.app_version,
            output=status.output,
            error=None if status.error is None else str(status.error),
        )
