"""A run's events: how much the worker writes (the run's event detail), and the events a reader derives from
what DBOS records anyway.

Two details, chosen per run:

- `steps` (the default): the worker writes nothing for events. A reader derives them from the run's status
  row and its step rows (`dbos.operation_outputs`, which carry each node's start and end times, its output
  or error): `run.started` once the run is claimed, `node.started` + `node.finished`/`node.failed` once a
  node's step is recorded (a durable `sleep`'s `node.finished` once its wake-up time has passed), then
  `run.finished`/`run.failed`. The reader polls (one status and one steps read per interval while it
  follows), so the cost is the follower's, not every run's; a node shows when it ends, not when it starts.
  A node of a pure type (`template`, `transform`: computed in the workflow, see `executors`) has no record
  unless it failed: it is derived from the flow's graph, once a recorded node that depends on it shows it
  ran, or the run ended (successfully, or with a node's failure: the executors compute every node whose
  inputs are ready). It shows at the time its inputs were ready (the end of the records it depends on, or
  the run's start), with `duration_ms` 0: its own few microseconds are not recorded. Events are ordered by
  time, a node's after the nodes it depends on.
- `live`: the worker writes every event to the run's DBOS stream `events` as it happens (every attempt's
  `node.started`, every failed attempt's `node.failed`), one write per event: a 3-node run costs about 40
  more statements and 20 more commits. `fireflow run --follow` asks for it; so does the sandbox queue.

The request's `"events"` field chooses; without it the queue's default applies (`live` on
`fireflow-sandbox`, `steps` elsewhere): `run_request.event_detail`. The events' names and shapes are the
contract's (`fireflow_contract.events`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from fireflow_contract import events, run_request
from fireflow_worker.flows.graph import node_dependencies
from fireflow_worker.flows.model import NodeSpec
from fireflow_worker.flows.registry import default_registry

NODE_STEP_PREFIX = "node:"
PROVISION_STEP = "provision"
MAX_MESSAGE_CHARS = 2000


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def flow_label(request: Any) -> str | None:
    """What names a run's flow: the flow's name, or the stored flow's name it refers to."""
    if not isinstance(request, dict):
        return None
    flow = request.get(run_request.FLOW)
    name = flow.get("name") if isinstance(flow, dict) else request.get(run_request.FLOW_REF)
    return one_line(str(name), 200) if name is not None else None


def node_types(definition: Any) -> dict[str, str]:
    nodes = definition.get("nodes") if isinstance(definition, dict) else None
    if not isinstance(nodes, dict):
        return {}
    return {str(k): str(v.get("type")) for k, v in nodes.items() if isinstance(v, dict)}


@dataclass(frozen=True)
class NodeGraph:
    """What the reader needs of a flow's graph: each node's dependencies and depth, and which are pure."""

    deps: dict[str, frozenset[str]] = field(default_factory=dict)
    depth: dict[str, int] = field(default_factory=dict)
    pure: frozenset[str] = frozenset()

    def ancestors(self, node: str) -> set[str]:
        found: set[str] = set()
        waiting = list(self.deps.get(node, ()))
        while waiting:
            dep = waiting.pop()
            if dep not in found:
                found.add(dep)
                waiting.extend(self.deps.get(dep, ()))
        return found


def node_graph(definition: Any) -> NodeGraph:
    """The graph of a flow definition as far as it can be read (a node that is no valid node is left out)."""
    nodes = definition.get("nodes") if isinstance(definition, dict) else None
    if not isinstance(nodes, dict):
        return NodeGraph()
    registry = default_registry()
    deps: dict[str, frozenset[str]] = {}
    pure: set[str] = set()
    for node_id, raw in nodes.items():
        try:
            spec = NodeSpec.model_validate(raw)
            found = node_dependencies(spec)
        except ValidationError:  # an invalid node fails its run before any node runs: nothing to derive
            continue
        deps[str(node_id)] = frozenset(found)
        if spec.type in registry and registry.get(spec.type).pure:
            pure.add(str(node_id))
    return NodeGraph(deps, _depths(deps), frozenset(pure))


def _depths(deps: Mapping[str, frozenset[str]]) -> dict[str, int]:
    """1 + the longest path of dependencies above each node (Kahn's order: no recursion on long chains)."""
    users: dict[str, list[str]] = {node: [] for node in deps}
    waiting = {node: 0 for node in deps}
    for node, found in deps.items():
        for dep in found:
            if dep in users:
                users[dep].append(node)
                waiting[node] += 1
    depth = {node: 1 for node, count in waiting.items() if count == 0}
    ready = list(depth)
    while ready:
        node = ready.pop()
        for user in users[node]:
            depth[user] = max(depth.get(user, 1), depth[node] + 1)
            waiting[user] -= 1
            if waiting[user] == 0:
                ready.append(user)
    return depth


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
    graph: NodeGraph = field(default_factory=NodeGraph)
    # Durable nodes whose `node.finished` waits for their wake-up time: node -> (wake at, started at, attempt).
    asleep: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    # Nodes known finished, and when (a durable one once awake, a pure one when derived).
    finished_at: dict[str, int] = field(default_factory=dict)
    # Nodes with a step record, and whether one of them failed.
    recorded: set[str] = field(default_factory=set)
    node_failed: bool = False
    started_at_ms: int = 0
    # The earliest start of a recorded node that depends on each node: when it had certainly finished (a
    # recovered run's start is its last claim, later than what its first execution did).
    needed_by_ms: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        flow = self.request.get(run_request.FLOW) if isinstance(self.request, dict) else None
        self.types = node_types(flow)
        self.graph = node_graph(flow)

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
        if self.ended:
            return []
        head: list[dict[str, Any]] = []
        terminal = status in run_request.TERMINAL_STATUSES
        if not self.started and (status != "ENQUEUED" or started_at_ms is not None or terminal):
            self.started = True
            self.started_at_ms = started_at_ms or now_ms
            head.append(events.run_started(flow_label(self.request), self.started_at_ms))
        derived: list[events.Event] = []
        # Nodes that certainly ran: those a newly recorded node depends on.
        ran: set[str] = set()
        new = [s for s in steps if s.function_id not in self.seen]
        new.sort(key=lambda s: (s.completed_at_ms or 0, s.function_id))
        for step in new:
            self.seen.add(step.function_id)
            if step.name == PROVISION_STEP and isinstance(step.output, dict):
                self.types = node_types(step.output)
                self.graph = node_graph(step.output)
            elif step.name.startswith(NODE_STEP_PREFIX):
                node = step.name[len(NODE_STEP_PREFIX) :]
                above = self.graph.ancestors(node)
                ran |= above
                began = step.started_at_ms or 0
                for dep in above:
                    self.needed_by_ms[dep] = min(self.needed_by_ms.get(dep, began), began)
                derived.extend(self._node(node, step))
        horizon = now_ms if not terminal else (now_ms if status == "SUCCESS" else (ended_at_ms or now_ms))
        for node, (wake_at, began, attempt) in sorted(self.asleep.items(), key=lambda item: item[1][0]):
            if wake_at <= horizon or status == "SUCCESS" or node in ran:
                del self.asleep[node]
                self.finished_at[node] = wake_at
                derived.append(events.node_finished(node, attempt, wake_at - began, wake_at))
        if status == "SUCCESS" or (status == "ERROR" and self.node_failed):
            ran |= self.graph.pure  # the executors compute every node whose inputs are ready
        derived.extend(self._pure(ran))
        derived.sort(key=self._position)
        if terminal:
            self.ended = True
            if status == "SUCCESS":
                derived.append(events.run_finished(ended_at_ms or now_ms))
            elif status == "ERROR":
                derived.append(events.run_failed(error or "", ended_at_ms or now_ms))
        return head + derived

    def _position(self, event: events.Event) -> tuple[int, int, str, int]:
        """In time; at one instant a node after those it depends on, and a node's start before its end."""
        rank = 0 if event[events.EVENT] == events.NODE_STARTED else 1
        node = event[events.NODE]
        return (int(event[events.AT_MS]), self.graph.depth.get(node, 0), node, rank)

    def _node(self, node: str, step: Step) -> list[events.Event]:
        self.recorded.add(node)
        began = step.started_at_ms or 0
        ended = step.completed_at_ms or began
        started = events.node_started(node, self.types.get(node), 1, began)
        if step.error is not None:
            self.node_failed = True
            message, attempts = error_line(step.error)
            return [started, events.node_failed(node, attempts, message, ended - began, ended)]
        output = step.output if isinstance(step.output, dict) else {}
        attempt = int(output.get("attempt", 1))
        wake_at = output.get("wake_at_ms")
        if wake_at:
            self.asleep[node] = (int(wake_at), began, attempt)
            return [started]
        self.finished_at[node] = ended
        return [started, events.node_finished(node, attempt, ended - began, ended)]

    def _pure(self, ran: set[str]) -> list[events.Event]:
        """The pure nodes (no record unless they failed) that ran and whose inputs are all finished."""
        derived: list[events.Event] = []
        waiting = self.graph.pure - self.recorded - self.finished_at.keys()
        for node in sorted(waiting & ran, key=lambda n: (self.graph.depth.get(n, 0), n)):
            deps = self.graph.deps.get(node, frozenset())
            if not all(dep in self.finished_at for dep in deps):
                continue
            at = max((self.finished_at[dep] for dep in deps), default=self.started_at_ms)
            at = min(at, self.needed_by_ms.get(node, at))
            self.finished_at[node] = at
            derived.extend(
                [events.node_started(node, self.types.get(node), 1, at), events.node_finished(node, 1, 0, at)]
            )
        return derived
