"""The dependency graph of a flow, and the substitution of references when a node is about to run.

A node depends on every node its params reference and on those it lists in `after`. All orderings are
by declaration order, so that a workflow replaying them makes the same calls in the same order.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from fireflow_worker.flows.model import Flow, NodeSpec
from fireflow_worker.flows.nodetype import NodeError
from fireflow_worker.flows.refs import Reference, ReferenceSyntaxError, lookup_path, scan, substitute


def node_dependencies(node: NodeSpec) -> set[str]:
    found = set(node.after)
    for _, ref in scan(node.params):
        if isinstance(ref, Reference) and ref.root == "nodes":
            found.add(ref.name)
    return found


def dependencies(flow: Flow) -> dict[str, set[str]]:
    """node id -> the ids of the nodes it waits for."""
    return {node_id: node_dependencies(node) for node_id, node in flow.nodes.items()}


def dependents(flow: Flow) -> dict[str, set[str]]:
    """node id -> the ids of the nodes that wait for it."""
    result: dict[str, set[str]] = {node_id: set() for node_id in flow.nodes}
    for node_id, deps in dependencies(flow).items():
        for dep in deps & result.keys():
            result[dep].add(node_id)
    return result


def terminal_nodes(flow: Flow) -> list[str]:
    """The nodes nothing depends on, in declaration order."""
    return [node_id for node_id, users in dependents(flow).items() if not users]


def output_nodes(flow: Flow) -> list[str]:
    """The nodes whose outputs make the run's result: `outputs`, else the terminal nodes."""
    return list(flow.outputs) if flow.outputs is not None else terminal_nodes(flow)


def topological_layers(flow: Flow) -> list[list[str]]:
    """Nodes grouped so that each depends only on earlier layers; one layer's nodes may run concurrently."""
    deps = dependencies(flow)
    placed: set[str] = set()
    remaining = list(flow.nodes)
    layers: list[list[str]] = []
    while remaining:
        layer = [node_id for node_id in remaining if deps[node_id] <= placed]
        if not layer:
            raise ValueError(f"flow {flow.name!r} has a cycle or an unknown dependency among {remaining}")
        layers.append(layer)
        placed.update(layer)
        remaining = [node_id for node_id in remaining if node_id not in placed]
    return layers


def find_cycles(deps: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Dependency cycles as paths `[a, b, a]` (a waits for b, b for a), each once; unknown ids are ignored.

    Not every elementary cycle is listed, but a graph with any cycle yields at least one.
    """
    order = {node_id: index for index, node_id in enumerate(deps)}
    ordered = {n: sorted((d for d in set(ds) if d in order), key=order.__getitem__) for n, ds in deps.items()}
    state = dict.fromkeys(deps, 0)  # 0 unvisited, 1 on the current path, 2 done
    cycles: list[list[str]] = []
    seen: set[tuple[str, ...]] = set()
    for start in deps:
        if state[start]:
            continue
        path = [start]
        stack = [iter(ordered[start])]
        state[start] = 1
        while stack:  # iterative DFS: a long chain must not hit the recursion limit
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state[nxt] == 1:
                cycle = path[path.index(nxt) :]
                pivot = cycle.index(min(cycle, key=order.__getitem__))
                key = tuple(cycle[pivot:] + cycle[:pivot])
                if key not in seen:
                    seen.add(key)
                    cycles.append([*key, key[0]])
            elif state[nxt] == 0:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(ordered[nxt]))
    return cycles


def resolve_params(params: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
    """The params with every reference replaced by the run input or node output it names.

    Raises a non-retryable NodeError when a reference cannot be resolved (a path into an output that
    lacks it, or a node that has not produced an output).
    """

    def lookup(ref: Reference) -> Any:
        source, what = (inputs, "input") if ref.root == "inputs" else (outputs, "output of node")
        if ref.name not in source:
            raise NodeError(f"{ref}: there is no {what} {ref.name!r}", retryable=False)
        try:
            # A copy: a node (user code in `python`) must not be able to change another node's output.
            return copy.deepcopy(lookup_path(source[ref.name], ref.path))
        except LookupError as exc:
            raise NodeError(f"{ref}: in the {what} {ref.name!r}, {exc.args[0]}", retryable=False) from exc

    try:
        resolved: dict[str, Any] = substitute(dict(params), lookup)
    except ReferenceSyntaxError as exc:
        raise NodeError(str(exc), retryable=False) from exc
    return resolved
