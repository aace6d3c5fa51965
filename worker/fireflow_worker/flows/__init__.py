"""Flows: the documented flow format, its validation, its dependency graph and the node types.

Pure: no DBOS and no database. The engine loads a flow with `load_flow`, checks a run's inputs with
`validate_run_inputs`, walks `topological_layers`, and for each node calls `resolve_params`,
`parse_params` and `run_node` with a `NodeContext`.
"""

from __future__ import annotations

from fireflow_worker.flows.graph import (
    dependencies,
    dependents,
    output_nodes,
    resolve_params,
    terminal_nodes,
    topological_layers,
)
from fireflow_worker.flows.model import Flow, InputSpec, InputType, NodeSpec, RetryPolicy
from fireflow_worker.flows.nodetype import (
    AnyNodeType,
    NodeContext,
    NodeError,
    NodeType,
    parse_params,
    retry_policy,
    run_node,
)
from fireflow_worker.flows.registry import (
    ENTRY_POINT_GROUP,
    NodeRegistry,
    RegistryError,
    builtin_registry,
    default_registry,
    load_registry,
)
from fireflow_worker.flows.validate import (
    FlowValidationError,
    load_flow,
    load_flow_file,
    validate_flow,
    validate_run_inputs,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "AnyNodeType",
    "Flow",
    "FlowValidationError",
    "InputSpec",
    "InputType",
    "NodeContext",
    "NodeError",
    "NodeRegistry",
    "NodeSpec",
    "NodeType",
    "RegistryError",
    "RetryPolicy",
    "builtin_registry",
    "default_registry",
    "dependencies",
    "dependents",
    "load_flow",
    "load_flow_file",
    "load_registry",
    "output_nodes",
    "parse_params",
    "resolve_params",
    "retry_policy",
    "run_node",
    "terminal_nodes",
    "topological_layers",
    "validate_flow",
    "validate_run_inputs",
]
