"""What the benchmark runs: a 3-node flow (template -> transform -> template) and how runs of it, or of the
raw DBOS baseline doing the same three steps, are enqueued.

This module must stay importable by the baseline worker, so it imports nothing from DBOS at module level.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Literal, Protocol

from fireflow_worker import queues

if TYPE_CHECKING:
    from dbos import EnqueueOptions

Kind = Literal["fireflow", "baseline"]
KINDS: tuple[Kind, ...] = ("fireflow", "baseline")

QUEUE = queues.EXECUTIONS
WORKER_CONCURRENCY = 50  # the worker's default, given to both kinds
APPLICATION_NAME = "fireflow"
RAW_WORKFLOW_NAME = "bench.raw_flow"

# The flow: a greeting, a record built from it, a line summarising the record. No sleeps, no I/O.
FLOW: dict[str, Any] = {
    "name": "bench-3-nodes",
    "inputs": {"who": {"type": "string"}},
    "nodes": {
        "greet": {"type": "template", "params": {"template": "Hello, ${inputs.who}!"}},
        "card": {
            "type": "transform",
            "params": {
                "value": {"greeting": "${nodes.greet}", "to": "${inputs.who}", "draft": True},
                "ops": [{"omit": ["draft"]}, {"rename": {"to": "recipient"}}],
            },
        },
        "summary": {
            "type": "template",
            "params": {"template": "${nodes.card.greeting} (to ${nodes.card.recipient})"},
        },
    },
    "outputs": ["summary"],
}


def expected_result(who: str) -> dict[str, Any]:
    """What both the flow and the baseline return for `who`."""
    return {"summary": f"Hello, {who}! (to {who})"}


class Enqueuer(Protocol):
    """Enqueues one run on `QUEUE` and returns its workflow id."""

    def enqueue(self, who: str) -> str: ...

    def result(self, run_id: str) -> Any: ...

    def close(self) -> None: ...


class FlowEnqueuer:
    """Runs of the flow, through the project's client (validation included, as in production)."""

    def __init__(self, database_url: str) -> None:
        from fireflow_worker.client import FireflowClient  # noqa: PLC0415 - imports DBOS

        self._client = FireflowClient(database_url, application_name=APPLICATION_NAME)

    def enqueue(self, who: str) -> str:
        return self._client.enqueue(FLOW, inputs={"who": who}, queue=QUEUE)

    def result(self, run_id: str) -> Any:
        return self._client.result(run_id)

    def close(self) -> None:
        self._client.close()


class RawEnqueuer:
    """Runs of the baseline workflow, through a plain `DBOSClient` configured like the project's client."""

    def __init__(self, database_url: str) -> None:
        from dbos import DBOSClient  # noqa: PLC0415

        self._client = DBOSClient(
            system_database_url=database_url, application_name=APPLICATION_NAME, use_listen_notify=True
        )

    def enqueue(self, who: str) -> str:
        options: EnqueueOptions = {
            "queue_name": QUEUE,
            "workflow_name": RAW_WORKFLOW_NAME,
            "workflow_id": str(uuid.uuid4()),
        }
        handle: Any = self._client.enqueue(options, {"inputs": {"who": who}})
        return str(handle.get_workflow_id())

    def result(self, run_id: str) -> Any:
        handle: Any = self._client.retrieve_workflow(run_id)
        return handle.get_result(polling_interval_sec=0.1)

    def close(self) -> None:
        self._client.destroy()


def enqueuer(kind: Kind, database_url: str) -> Enqueuer:
    return FlowEnqueuer(database_url) if kind == "fireflow" else RawEnqueuer(database_url)
