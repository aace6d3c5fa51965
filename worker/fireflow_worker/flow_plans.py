"""A flow's execution plan (the validated flow, its node order, dependencies and retry policies), built once
per distinct flow a worker process sees, not once per run.

A fleet typically runs a few flows many times. Parsing and validating a flow, then sorting its graph, cost
more worker CPU per run than DBOS's own bookkeeping of a small flow, so plans are cached by the flow's exact
content (its `repr`): the same definition always yields the same plan, and what validation depends
on besides the definition (the node registry, the `python` allow-list) is fixed for the process's life.
An invalid flow is not cached; it fails every run that carries it, with the same message.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from dbos import StepOptions

from fireflow_worker.flows.graph import compile_params, dependencies, output_nodes, topological_layers
from fireflow_worker.flows.model import Flow, RetryPolicy
from fireflow_worker.flows.nodetype import retry_policy
from fireflow_worker.flows.refs import Template
from fireflow_worker.flows.registry import default_registry
from fireflow_worker.flows.validate import load_flow

# Bounds on what the cache holds: entries, and the total size of their keys (about their flows' size).
MAX_PLANS = 256
MAX_CACHED_CHARS = 32 << 20


@dataclass(frozen=True)
class FlowPlan:
    flow: Flow
    order: tuple[str, ...]  # topological: each node's step id is reserved in this order
    deps: dict[str, tuple[str, ...]]  # each node's dependencies, sorted
    outputs: tuple[str, ...]
    # Each node depends on the one before it: no two nodes could ever run at once.
    is_chain: bool
    # Each node's params, compiled once (see graph.compile_params).
    params: dict[str, Template]
    # Each node's step options from its name and retry policy (a run adds its own `should_retry`).
    step_options: dict[str, StepOptions]
    # The nodes of pure types (see NodeType.pure): computed in the workflow, not checkpointed.
    pure: frozenset[str] = frozenset()


def build_plan(definition: Any) -> FlowPlan:
    """Parse and validate the flow (FlowValidationError) and plan its execution."""
    flow = load_flow(definition)
    registry = default_registry()
    deps = dependencies(flow)
    layers = topological_layers(flow)
    retries = {node_id: retry_policy(registry.get(spec.type), spec) for node_id, spec in flow.nodes.items()}
    return FlowPlan(
        flow=flow,
        order=tuple(node_id for layer in layers for node_id in layer),
        deps={node_id: tuple(sorted(found)) for node_id, found in deps.items()},
        outputs=tuple(output_nodes(flow)),
        is_chain=all(len(layer) == 1 for layer in layers),
        pure=frozenset(node_id for node_id, spec in flow.nodes.items() if registry.get(spec.type).pure),
        params={node_id: compile_params(spec.params) for node_id, spec in flow.nodes.items()},
        step_options={node_id: _step_options(node_id, retry) for node_id, retry in retries.items()},
    )


def _step_options(node_id: str, retry: RetryPolicy) -> StepOptions:
    return {
        "name": f"node:{node_id}",
        "retries_allowed": retry.max_attempts > 1,
        "max_attempts": retry.max_attempts,
        "interval_seconds": retry.interval_seconds,
        "backoff_rate": retry.backoff_rate,
    }


class PlanCache:
    """A thread-safe LRU of plans by the flow's content."""

    def __init__(self, max_plans: int = MAX_PLANS, max_chars: int = MAX_CACHED_CHARS) -> None:
        self._plans: OrderedDict[str, FlowPlan] = OrderedDict()
        self._chars = 0
        self._max_plans = max_plans
        self._max_chars = max_chars
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, definition: Any) -> FlowPlan:
        key = _content_key(definition)
        if key is not None:
            with self._lock:
                plan = self._plans.get(key)
                if plan is not None:
                    self._plans.move_to_end(key)
                    self.hits += 1
                    return plan
        self.misses += 1
        plan = build_plan(definition)
        if key is not None and len(key) <= self._max_chars:
            with self._lock:
                if key not in self._plans:
                    self._plans[key] = plan
                    self._chars += len(key)
                while len(self._plans) > self._max_plans or self._chars > self._max_chars:
                    evicted, _ = self._plans.popitem(last=False)
                    self._chars -= len(evicted)
        return plan


def _content_key(definition: Any) -> str | None:
    """The flow's exact content as text; None for what is not a mapping (validation then says why).

    A definition reaches the engine as JSON data (DBOS decodes the run's portable JSON, `run_encodings` makes
    other encodings plain JSON data), whose `repr` tells every two values apart (`1`, `1.0` and `True`
    included) at two thirds of the cost of encoding it as JSON again, run after run."""
    if not isinstance(definition, dict):
        return None
    try:
        return repr(definition)
    except RecursionError:
        return None
