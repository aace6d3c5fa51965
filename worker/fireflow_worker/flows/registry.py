"""Node types by name: the built-ins plus those other packages declare in the `fireflow.nodes` entry points.

A plugin declares, in its pyproject.toml:

    [project.entry-points."fireflow.nodes"]
    my-type = "my_package.nodes:MyNode"     # the entry point's name is the node type's `name`

A type that sets `pure = True` promises that its output is a deterministic function of its params, with no
side effect (no I/O, no clock, no random state, no sleep): it is computed inside the run's workflow, not
checkpointed, and computed again when the run is recovered. A type that breaks the promise may give a
recovered run another value than its first execution saw; leave `pure` False for anything with effects.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import re
from typing import Any

from pydantic import BaseModel

from fireflow_worker.flows.model import RetryPolicy
from fireflow_worker.flows.nodes import BUILTIN_NODE_TYPES
from fireflow_worker.flows.nodetype import AnyNodeType, NodeType

ENTRY_POINT_GROUP = "fireflow.nodes"
TYPE_NAME_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")


class RegistryError(RuntimeError):
    """A node type cannot be registered: broken entry point, bad class or duplicate name."""


class NodeRegistry:
    def __init__(self) -> None:
        self._types: dict[str, AnyNodeType] = {}
        self._origins: dict[str, str] = {}

    def register(self, node_type: Any, origin: str = "built-in") -> None:
        """Add a node type; `origin` says where it came from, for error messages."""
        _check_node_type(node_type, origin)
        name = node_type.name
        if name in self._types:
            raise RegistryError(f"node type {name!r} is defined twice: by {self._origins[name]} and by {origin}")
        self._types[name] = node_type
        self._origins[name] = origin

    def get(self, name: str) -> AnyNodeType:
        try:
            return self._types[name]
        except KeyError:
            raise KeyError(f"unknown node type {name!r} (known: {', '.join(self.names())})") from None

    def names(self) -> list[str]:
        return sorted(self._types)

    def __contains__(self, name: object) -> bool:
        return name in self._types


def _check_node_type(node_type: Any, origin: str) -> None:
    if not (isinstance(node_type, type) and issubclass(node_type, NodeType)):
        raise RegistryError(f"{origin} is {node_type!r}, not a NodeType subclass")
    if inspect.isabstract(node_type):
        raise RegistryError(f"{origin}: {node_type.__qualname__} is abstract (does it implement run()?)")
    name = getattr(node_type, "name", None)
    if not isinstance(name, str) or not TYPE_NAME_RE.fullmatch(name):
        raise RegistryError(f"{origin}: name {name!r} must match {TYPE_NAME_RE.pattern}")
    params = getattr(node_type, "Params", None)
    if not (isinstance(params, type) and issubclass(params, BaseModel)):
        raise RegistryError(f"{origin}: Params must be a pydantic BaseModel subclass, got {params!r}")
    if not isinstance(node_type.retry, RetryPolicy) or not isinstance(node_type.durable, bool):
        raise RegistryError(f"{origin}: retry must be a RetryPolicy and durable a bool")
    if not isinstance(node_type.pure, bool):
        raise RegistryError(f"{origin}: pure must be a bool")
    if node_type.pure and node_type.durable:
        # A durable node sleeps, which a pure one may not: its time is not a function of its params.
        raise RegistryError(f"{origin}: a pure node type cannot be durable (pure means no sleep and no effect)")


def builtin_registry() -> NodeRegistry:
    registry = NodeRegistry()
    for node_type in BUILTIN_NODE_TYPES:
        registry.register(node_type)
    return registry


def load_registry(group: str = ENTRY_POINT_GROUP) -> NodeRegistry:
    """The built-ins plus every entry point of `group`; raises RegistryError on the first bad one."""
    registry = builtin_registry()
    for entry_point in sorted(importlib.metadata.entry_points(group=group), key=lambda ep: ep.name):
        dist = entry_point.dist
        origin = f"entry point {entry_point.name!r} = {entry_point.value!r}" + (
            f" of {dist.name} {dist.version}" if dist is not None else ""
        )
        try:
            node_type = entry_point.load()
        except Exception as exc:
            # Whatever the plugin's import raises, the worker must not start with a half-loaded registry.
            raise RegistryError(f"cannot load {origin}: {type(exc).__name__}: {exc}") from exc
        _check_node_type(node_type, origin)
        if node_type.name != entry_point.name:
            raise RegistryError(f"{origin}: the entry point's name must be the node type's name {node_type.name!r}")
        registry.register(node_type, origin)
    return registry


@functools.cache
def default_registry() -> NodeRegistry:
    """The process-wide registry, loaded once. Call it at worker start so a broken plugin fails fast."""
    return load_registry()
