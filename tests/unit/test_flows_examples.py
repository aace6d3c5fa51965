"""The example flows load, and produce the documented results when run by a plain in-process runner.

The runner below is the engine's contract in miniature: layers in order, references resolved from earlier
outputs, params parsed, each node attempted up to its retry policy's max_attempts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fireflow_worker.flows.graph import output_nodes, resolve_params, topological_layers
from fireflow_worker.flows.model import Flow
from fireflow_worker.flows.nodetype import NodeContext, NodeError, parse_params, retry_policy, run_node
from fireflow_worker.flows.registry import builtin_registry
from fireflow_worker.flows.validate import load_flow_file, validate_run_inputs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "flows"
REGISTRY = builtin_registry()


def run_flow(flow: Flow, inputs: dict[str, Any]) -> tuple[dict[str, Any], list[float]]:
    """(result, sleeps requested); no durability, no concurrency, no retry waits."""
    checked = validate_run_inputs(flow, inputs)
    outputs: dict[str, Any] = {}
    sleeps: list[float] = []
    for layer in topological_layers(flow):
        for node_id in layer:
            spec = flow.nodes[node_id]
            node_type = REGISTRY.get(spec.type)
            params = parse_params(node_type, resolve_params(spec.params, checked, outputs))
            attempts = retry_policy(node_type, spec).max_attempts
            for attempt in range(1, attempts + 1):
                ctx = NodeContext(run_id="example", node_id=node_id, sleeper=sleeps.append, attempt=attempt)
                try:
                    outputs[node_id] = run_node(node_type, params, ctx)
                    break
                except NodeError:
                    if attempt == attempts:
                        raise
    return {node_id: outputs[node_id] for node_id in output_nodes(flow)}, sleeps


def example(name: str) -> Flow:
    return load_flow_file(EXAMPLES / name, REGISTRY)


def test_should_ship_examples_that_all_load() -> None:
    names = sorted(path.name for path in EXAMPLES.glob("*.yaml"))
    assert names == ["fan-out-fan-in.yaml", "greet.yaml", "retry.yaml"]
    for name in names:
        example(name)


def test_should_greet_and_shape_a_card() -> None:
    flow = example("greet.yaml")
    assert flow.inputs["who"].example == "world"
    result, _ = run_flow(flow, {"who": "Ada"})
    assert result == {
        "card": {
            "greeting": "Hello, Ada!",
            "recipient": "Ada",
            "note": "rendered by node hello; ${...} stays literal",
        }
    }
    with pytest.raises(ValueError, match="input 'who' is required"):
        run_flow(flow, {})


def test_should_fan_out_into_independent_sleeps_and_join_them() -> None:
    flow = example("fan-out-fan-in.yaml")
    assert topological_layers(flow) == [["start"], ["left", "middle", "right"], ["collect"], ["total"]]
    result, sleeps = run_flow(flow, {"seconds": 0.5})
    assert sleeps == [0.5, 0.5, 0.5]
    assert result == {
        "collect": [
            {"branch": "left", "slept": 0.5},
            {"branch": "middle", "slept": 0.5},
            {"branch": "right", "slept": 0.5},
        ],
        "total": 1.5,
    }


def test_should_succeed_on_the_third_attempt_of_the_flaky_node() -> None:
    flow = example("retry.yaml")
    result, _ = run_flow(flow, {})
    assert result == {"report": "succeeded on attempt 3"}
