"""What the benchmark runs, and how runs are enqueued, for each kind of worker:

- `fireflow`: the project's worker running a FireFlow flow: `1-node` (template) or `3-node` (template ->
  transform -> template), both of pure nodes (computed in the workflow, no step), or `3-python`: three
  effectful `python` nodes calling the trivial functions of `benchmarks/effects.py` (three steps);
- `raw`: raw DBOS-py 3.4 (`benchmarks/baseline_worker.py`), a plain sync `@DBOS.workflow` of 1 or 3 steps
  computing the same results; `raw-async` is the same as an async workflow (the form the engine has);
- `ts`: DBOS-TS 4.27.6, the TypeScript worker's SDK (`benchmarks/ts_worker/worker.js`), the same steps.

Every run is enqueued with the application version `held`, which no worker claims; the measurement releases
them all in one UPDATE (see measure.py). A TS database has the TS SDK's schema, so TS runs are enqueued by
the TS SDK's own client (`ts_worker/enqueue.js`).

This module must stay importable by the baseline worker, so it imports nothing from DBOS at module level.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from fireflow_contract import queues, run_request

if TYPE_CHECKING:
    from dbos import EnqueueOptions

Kind = Literal["fireflow", "raw", "raw-async", "ts"]
FlowName = Literal["1-node", "3-node", "3-python"]
FLOW_NAMES: tuple[FlowName, ...] = ("1-node", "3-node", "3-python")
# The steps the peers (raw DBOS-py, DBOS-TS) run for each flow.
PEER_STEPS: dict[str, int] = {"1-node": 1, "3-node": 3, "3-python": 3}
# The module the `python` nodes of `3-python` call (the FireFlow workers' FIREFLOW_PYTHON_NODE_MODULES).
EFFECTS_MODULE = "benchmarks.effects"
KINDS: tuple[Kind, ...] = ("fireflow", "raw", "ts")
LABELS: dict[str, str] = {
    "fireflow": "FireFlow worker",
    "raw": "raw DBOS-py",
    "raw-async": "raw DBOS-py (async)",
    "ts": "DBOS-TS",
}

QUEUE = queues.EXECUTIONS
WORKER_CONCURRENCY = 50  # the worker's default, given to every kind
APPLICATION_NAME = "fireflow"
RAW_WORKFLOW_NAME = "bench.raw_flow"
FLOW_WORKFLOW_NAME = run_request.WORKFLOW_NAME
HELD_VERSION = "held"
TS_DIR = Path(__file__).resolve().parent / "ts_worker"

# The flows: a greeting; or a greeting, a record built from it, a line summarising the record. No I/O.
FLOWS: dict[str, dict[str, Any]] = {
    "1-node": {
        "name": "bench-1-node",
        "inputs": {"who": {"type": "string"}},
        "nodes": {"greet": {"type": "template", "params": {"template": "Hello, ${inputs.who}!"}}},
        "outputs": ["greet"],
    },
    "3-node": {
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
    },
    "3-python": {
        "name": "bench-3-python",
        "inputs": {"who": {"type": "string"}},
        "nodes": {
            "greet": {
                "type": "python",
                "params": {"function": f"{EFFECTS_MODULE}:greet_text", "kwargs": {"who": "${inputs.who}"}},
            },
            "card": {
                "type": "python",
                "params": {
                    "function": f"{EFFECTS_MODULE}:card_value",
                    "kwargs": {"greeting": "${nodes.greet}", "who": "${inputs.who}"},
                },
            },
            "summary": {
                "type": "python",
                "params": {"function": f"{EFFECTS_MODULE}:summary_text", "kwargs": {"value": "${nodes.card}"}},
            },
        },
        "outputs": ["summary"],
    },
}


def slug(flow: str) -> str:
    """The flow's name as a part of a database name."""
    return flow.replace("-", "")


def expected_result(flow: str, who: str) -> dict[str, Any]:
    """What every kind returns for `who`."""
    if PEER_STEPS[flow] == 1:
        return {"greet": f"Hello, {who}!"}
    return {"summary": f"Hello, {who}! (to {who})"}


class Enqueuer(Protocol):
    """Enqueues runs on `QUEUE`, held (no worker claims them until released) or not; returns their ids."""

    def enqueue(self, who: str, *, held: bool = False) -> str: ...

    def close(self) -> None: ...


class PyEnqueuer:
    """Runs of the flow (`fireflow`) or of the raw workflow (`raw`, `raw-async`) through a DBOSClient.

    Held runs of the flow skip the project client's validation (it cannot pin a version); unheld ones go
    through FireflowClient, as in production."""

    def __init__(self, kind: Kind, database_url: str, flow: str, events: str | None = None) -> None:
        from dbos import DBOSClient  # noqa: PLC0415

        self._kind = kind
        self._flow = flow
        self._events = events  # a FireFlow run's event detail (`steps`, `live`); None: the queue's default
        self._client = DBOSClient(
            system_database_url=database_url, application_name=APPLICATION_NAME, use_listen_notify=True
        )
        self._fireflow: Any = None
        if kind == "fireflow":
            from fireflow_worker.client import FireflowClient  # noqa: PLC0415

            self._fireflow = FireflowClient(database_url, application_name=APPLICATION_NAME)

    def enqueue(self, who: str, *, held: bool = False) -> str:
        if self._fireflow is not None and not held:
            return str(self._fireflow.enqueue(FLOWS[self._flow], inputs={"who": who}, queue=QUEUE, events=self._events))
        fireflow = self._kind == "fireflow"
        options: EnqueueOptions = {
            "queue_name": QUEUE,
            "workflow_name": FLOW_WORKFLOW_NAME if fireflow else RAW_WORKFLOW_NAME,
            "workflow_id": str(uuid.uuid4()),
        }
        if held:
            options["app_version"] = HELD_VERSION
        if fireflow:  # as FireflowClient enqueues: a run in another encoding is rewritten when claimed
            from dbos import WorkflowSerializationFormat  # noqa: PLC0415

            options["serialization_type"] = WorkflowSerializationFormat.PORTABLE
        request: dict[str, Any] = (
            {"flow": FLOWS[self._flow], "inputs": {"who": who}, "queue": QUEUE}
            if fireflow
            else {"inputs": {"who": who}, "nodes": PEER_STEPS[self._flow]}
        )
        if fireflow and self._events is not None:
            request["events"] = self._events
        handle: Any = self._client.enqueue(options, request)
        return str(handle.get_workflow_id())

    def close(self) -> None:
        if self._fireflow is not None:
            self._fireflow.close()
        self._client.destroy()


class TsEnqueuer:
    """Runs of the TS worker's workflow, through the TS SDK's client in a node process."""

    def __init__(self, database_url: str, flow: str) -> None:
        env = {**os.environ, "DATABASE_URL_EXECUTIONS": database_url, "BENCH_QUEUE": QUEUE}
        self._nodes = PEER_STEPS[flow]
        self._process = subprocess.Popen(
            ["node", str(TS_DIR / "enqueue.js")],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def enqueue(self, who: str, *, held: bool = False) -> str:
        assert self._process.stdin is not None and self._process.stdout is not None
        request: dict[str, Any] = {"who": who, "nodes": self._nodes}
        if held:
            request["appVersion"] = HELD_VERSION
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        answer = self._process.stdout.readline().strip()
        if not answer or answer.startswith("error:"):
            raise RuntimeError(f"the TS enqueuer failed: {answer or 'it exited'}")
        return answer

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=30)


def enqueuer(kind: Kind, database_url: str, flow: str, events: str | None = None) -> Enqueuer:
    """`events` (a FireFlow run's event detail) only for `fireflow`."""
    return TsEnqueuer(database_url, flow) if kind == "ts" else PyEnqueuer(kind, database_url, flow, events)


def decode_output(output: str | None, serialization: str | None) -> Any:
    """A finished run's output as stored (Python's pickle, the portable JSON, or TS's superjson)."""
    if output is None:
        return None
    if serialization == "js_superjson":
        return json.loads(output)["json"]
    from dbos._serialization import DBOSDefaultSerializer, deserialize_value  # noqa: PLC0415 - pinned version

    return deserialize_value(output, serialization, DBOSDefaultSerializer)
