"""A Python caller of the FireFlow worker through DBOS-py's own DBOSClient, without this project's package:
what another Python service on the executions database does (docs/run-contract.md). tests/worker runs it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

from dbos import DBOSClient, WorkflowSerializationFormat

WORKFLOW_NAME = "fireflow.run_flow"
EXECUTIONS_QUEUE = "fireflow-executions"
EVENTS_STREAM = "events"


def connect(database_url: str) -> DBOSClient:
    # LISTEN on: stream readers wake on DBOS's notification instead of polling once a second.
    return DBOSClient(system_database_url=database_url, application_name="fireflow", use_listen_notify=True)


def enqueue_run(client: DBOSClient, request: dict[str, Any]) -> str:
    """Enqueue one run in portable JSON (readable by every SDK); returns its id."""
    handle: Any = client.enqueue(
        {
            "queue_name": request.get("queue", EXECUTIONS_QUEUE),
            "workflow_name": WORKFLOW_NAME,
            "workflow_id": str(uuid.uuid4()),
            "serialization_type": WorkflowSerializationFormat.PORTABLE,
        },
        request,
    )
    return str(handle.get_workflow_id())


def run_result(client: DBOSClient, run_id: str) -> Any:
    """The run's result; raises its error (a `dbos.PortableWorkflowError`: `.name`, `.message`) if it failed."""
    return client.retrieve_workflow(run_id).get_result(polling_interval_sec=0.1)


def run_events(client: DBOSClient, run_id: str) -> Iterator[dict[str, Any]]:
    """The live events of a run enqueued with "events": "live", as they are written, until it ends."""
    yield from client.read_stream(run_id, EVENTS_STREAM)
