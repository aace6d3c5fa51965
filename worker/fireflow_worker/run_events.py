"""A run's events: how much the worker writes (the run's event detail), and the events a reader derives from
what DBOS records anyway.

Two details, chosen per run:

- `steps` (the default): the worker writes nothing for events. A reader derives them from the run's status
  row and its step rows (`dbos.operation_outputs`, which carry each node's start and end times, its output
  or error): `run.started` once the run is claimed, `node.started` + `node.finished`/`node.failed` once a
  node's step is recorded (a durable `sleep`'s `node.finished` once its wake-up time has passed), then
  `run.finished`/`run.failed`. The reader polls (one status and one steps read per interval while it
  follows), so the cost is the follower's, not every run's; a node shows when it ends, not when it starts.
- `live`: the worker writes every event to the run's DBOS stream `events` as it happens (every attempt's
  `node.started`, every failed attempt's `node.failed`), one write per event: a 3-node run costs about 40
  more statements and 20 more commits. `fireflow run --follow` asks for it; so does the sandbox queue.

The request's `"events"` field chooses; without it the queue's default applies (`live` on
`fireflow-sandbox`, `steps` elsewhere).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fireflow_contract import queues

LIVE = "live"
STEPS = "steps"
EVENT_DETAILS = (STEPS, LIVE)
LIVE_BY_DEFAULT = (queues.SANDBOX,)
NODE_STEP_PREFIX = "node:"
PROVISION_STEP = "provision"
MAX_MESSAGE_CHARS = 2000


def event_detail(request: Any) -> str:
    """The run's event detail: its request's choice, else its queue's default."""
    if not isinstance(request, dict):
        return STEPS
    chosen = request.get("events")
    if chosen in EVENT_DETAILS:
        return str(chosen)
    return LIVE if request.get("queue") in LIVE_BY_DEFAULT else STEPS


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def flow_label(request: Any) -> str | None:
    """What names a run's flow: the flow's name, or the stored flow's name it refers to."""
    if not isinstance(request, dict):
        return None
    flow = request.get("flow")
    name = flow.get("name") if isinstance(flow, dict) else request.get("flow_ref")
    return one_line(str(name), 200) if name is not None else None


def node_types(definition: Any) -> dict[str, str]:
    nodes = definition.get("nodes") if isinstance(definition, dict) else None
    if not isinstance(nodes, dict):
        return {}
    return {str(k): str(v.get("type")) for k, v in nodes.items() if isinstance(v, dict)}


def error_line(error: BaseException | None) -> tuple[str, int]:
    """A recorded step error as (one line, attempts it took)."""
    if error is None:
        return "", 1
    errors = getattr(error, "errors", None)
    if isinstance(errors, list) and errors:  # DBOSMaxStepRetriesExceeded: every attempt's error
        last = errors[-1]
        return one_line(getattr(last, "message", None) or str(last) or type(last).__name__), len(errors)
    return one_line(getattr(error, "message", None) or str(error) or type(error).__name__), 1


@dataclass
class Step:
    """One recorded step of a run, as DBOS lists it."""

    function_id: int
    name: str
    output: Any
    error: BaseException | None
    started_at_ms: int | None
    completed_at_ms: int | None

    @staticmethod
    def of(info: Mapping[str, Any]) -> Step:
        return Step(
            int(info["function_id"]),
            str(info["function_name"]),
            info.get("output"),
            info.get("error"),
            info.get("started_at_epoch_ms"),
            info.get("completed_at_epoch_ms"),
        )


@dataclass
class Deriver:
    """Turns successive reads of a run (status + steps) into its events, each event once."""

    request: Any
    started: bool = False
    ended: bool = False
    seen: set[int] = field(default_factory=set)
    types: dict[str, str] = field(default_factory=dict)
    # Durable nodes whose `node.finished` waits for their wake-up time: node -> (wake at, started at, attempt).
    asleep: dict[str, tuple[int, int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        flow = self.request.get("flow") if isinstance(self.request, dict) else None
        self.types = node_types(flow)

    def update(
        self,
        status: str,
        started_at_ms: int | None,
        ended_at_ms: int | None,
        error: str | None,
        steps: Iterable[Step],
        now_ms: int,
    ) -> list[dict[str, Any]]:
        """The events not yet emitted, given the run's current status and every step recorded so far."""
        events: list[dict[str, Any]] = []
        if self.ended:
            return events
        if not self.started and (status != "ENQUEUED" or started_at_ms is not None):
            self.started = True
            events.append({"event": "run.started", "flow": flow_label(self.request), "at_ms": started_at_ms or now_ms})
        new = [s for s in steps if s.function_id not in self.seen]
        new.sort(key=lambda s: (s.completed_at_ms or 0, s.function_id))
        for step in new:
            self.seen.add(step.function_id)
            if step.name == PROVISION_STEP and isinstance(step.output, dict):
                self.types = node_types(step.output)
            elif step.name.startswith(NODE_STEP_PREFIX):
                events.extend(self._node(step))
        terminal = status in ("SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")
        horizon = now_ms if not terminal else (now_ms if status == "SUCCESS" else (ended_at_ms or now_ms))
        for node, (wake_at, began, attempt) in sorted(self.asleep.items(), key=lambda item: item[1][0]):
            if wake_at <= horizon or status == "SUCCESS":
                del self.asleep[node]
                events.append(_finished(node, attempt, wake_at - began, wake_at))
        if terminal:
            self.ended = True
            if not self.started:
                events.insert(0, {"event": "run.started", "flow": flow_label(self.request), "at_ms": now_ms})
            if status == "SUCCESS":
                events.append({"event": "run.finished", "at_ms": ended_at_ms or now_ms})
            elif status == "ERROR":
                events.append({"event": "run.failed", "error": error or "", "at_ms": ended_at_ms or now_ms})
        return events

    def _node(self, step: Step) -> list[dict[str, Any]]:
        node = step.name[len(NODE_STEP_PREFIX) :]
        began = step.started_at_ms or 0
        ended = step.completed_at_ms or began
        started = {"event": "node.started", "node": node, "type": self.types.get(node), "attempt": 1, "at_ms": began}
        if step.error is not None:
            message, attempts = error_line(step.error)
            failed = {
                "event": "node.failed",
                "node": node,
                "attempt": attempts,
                "error": message,
                "duration_ms": ended - began,
                "at_ms": ended,
            }
            return [started, failed]
        output = step.output if isinstance(step.output, dict) else {}
        attempt = int(output.get("attempt", 1))
        wake_at = output.get("wake_at_ms")
        if wake_at:
            self.asleep[node] = (int(wake_at), began, attempt)
            return [started]
        return [started, _finished(node, attempt, ended - began, ended)]


def _finished(node: str, attempt: int, duration_ms: int, at_ms: int) -> dict[str, Any]:
    return {"event": "node.finished", "node": node, "attempt": attempt, "duration_ms": duration_ms, "at_ms": at_ms}
