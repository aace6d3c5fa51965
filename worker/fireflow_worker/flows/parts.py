"""What the semantic checks of a flow need, taken from a valid Flow or salvaged from data the model rejected."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from fireflow_worker.flows.model import Flow, InputSpec, NodeSpec

M = TypeVar("M", bound=BaseModel)


@dataclass
class FlowParts:
    """What the semantic checks need; from a Flow, or salvaged from data the Flow model rejected."""

    node_ids: list[str]  # every id, including those whose spec is invalid
    nodes: dict[str, NodeSpec]
    inputs: dict[str, InputSpec | None]  # None: declared, but its spec is invalid
    outputs: list[str] | None
    # Nodes whose params are not a mapping: checking the empty params that stand in would report them missing.
    unreadable_params: set[str]

    @classmethod
    def of_flow(cls, flow: Flow) -> FlowParts:
        return cls(list(flow.nodes), dict(flow.nodes), dict(flow.inputs), flow.outputs, set())

    @classmethod
    def salvage(cls, data: Mapping[str, Any]) -> FlowParts:
        # The model's own errors are already reported; keep what parses so the other checks still run.
        raw_nodes = data.get("nodes")
        raw_nodes = raw_nodes if isinstance(raw_nodes, dict) else {}
        raw_inputs = data.get("inputs")
        raw_inputs = raw_inputs if isinstance(raw_inputs, dict) else {}
        outputs = data.get("outputs")
        valid_outputs = isinstance(outputs, list) and all(isinstance(item, str) for item in outputs)
        nodes = {
            node_id: spec for node_id, raw in raw_nodes.items() if (spec := parse_lenient(NodeSpec, raw)) is not None
        }
        inputs = {name: parse_lenient(InputSpec, raw) for name, raw in raw_inputs.items()}
        unreadable = {
            node_id
            for node_id, raw in raw_nodes.items()
            if isinstance(raw, dict) and not isinstance(raw.get("params", {}), dict)
        }
        return cls(list(raw_nodes), nodes, inputs, outputs if valid_outputs else None, unreadable)


def parse_lenient(model: type[M], raw: Any) -> M | None:
    """The model from `raw`, else from `raw` without its invalid fields, else None.

    Dropping the invalid fields lets a node with a bad `retry` still have its params and references checked.
    """
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        if not isinstance(raw, dict):
            return None
        invalid = {error["loc"][0] for error in exc.errors() if error["loc"]}
        try:
            return model.model_validate({key: value for key, value in raw.items() if key not in invalid})
        except ValidationError:
            return None
