"""The built-in node types."""

from __future__ import annotations

from fireflow_worker.flows.nodes.fail import FailNode
from fireflow_worker.flows.nodes.http import HttpNode
from fireflow_worker.flows.nodes.python import PythonNode
from fireflow_worker.flows.nodes.sleep import SleepNode
from fireflow_worker.flows.nodes.template import TemplateNode
from fireflow_worker.flows.nodes.transform import TransformNode
from fireflow_worker.flows.nodetype import AnyNodeType

BUILTIN_NODE_TYPES: tuple[AnyNodeType, ...] = (
    TemplateNode,
    TransformNode,
    HttpNode,
    SleepNode,
    PythonNode,
    FailNode,
)

__all__ = [
    "BUILTIN_NODE_TYPES",
    "FailNode",
    "HttpNode",
    "PythonNode",
    "SleepNode",
    "TemplateNode",
    "TransformNode",
]
