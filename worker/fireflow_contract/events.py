"""A run's events (pure), part of the run contract (docs/run-contract.md#events): each event's name and
shape, built by one function each. The worker writes them to the run's stream (`run_request.EVENTS_STREAM`)
with the `live` event detail; `FireflowClient.events` derives the same events from DBOS's records with
`steps`. Every event has `event` first and `at_ms` (epoch milliseconds) last.
"""

from __future__ import annotations

from typing import Any

RUN_STARTED = "run.started"
NODE_STARTED = "node.started"
NODE_FINISHED = "node.finished"
NODE_FAILED = "node.failed"
RUN_FINISHED = "run.finished"
RUN_FAILED = "run.failed"
EVENT_NAMES = (RUN_STARTED, NODE_STARTED, NODE_FINISHED, NODE_FAILED, RUN_FINISHED, RUN_FAILED)

# The keys every event, or every node's event, carries.
EVENT = "event"
AT_MS = "at_ms"
NODE = "node"

Event = dict[str, Any]


def run_started(flow: str | None, at_ms: int) -> Event:
    """`flow`: the flow's name, or the stored flow's name the request refers to."""
    return {EVENT: RUN_STARTED, "flow": flow, AT_MS: at_ms}


def node_started(node: str, node_type: str | None, attempt: int, at_ms: int) -> Event:
    return {EVENT: NODE_STARTED, NODE: node, "type": node_type, "attempt": attempt, AT_MS: at_ms}


def node_finished(node: str, attempt: int, duration_ms: int, at_ms: int) -> Event:
    return {EVENT: NODE_FINISHED, NODE: node, "attempt": attempt, "duration_ms": duration_ms, AT_MS: at_ms}


def node_failed(node: str, attempt: int, error: str, duration_ms: int, at_ms: int) -> Event:
    """`error`: one line."""
    return {
        EVENT: NODE_FAILED,
        NODE: node,
        "attempt": attempt,
        "error": error,
        "duration_ms": duration_ms,
        AT_MS: at_ms,
    }


def run_finished(at_ms: int) -> Event:
    return {EVENT: RUN_FINISHED, AT_MS: at_ms}


def run_failed(error: str, at_ms: int) -> Event:
    """`error`: the run's error message."""
    return {EVENT: RUN_FAILED, "error": error, AT_MS: at_ms}
