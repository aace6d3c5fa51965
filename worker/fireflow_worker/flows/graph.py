"""The dependency graph of a flow, and the substitution of references when a node is about to run.

A node depends on every node its params reference and on those it lists in `after`. All orderings are
by declaration order, so that a workflow replaying them makes the same calls in the same order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fireflow_worker.flows.limits import format_bytes, json_bytes
from fireflow_worker.flows.model import Flow, NodeSpec
from fireflow_worker.flows.nodetype import NodeError
from fireflow_worker.flows.refs import Reference, ReferenceSyntaxError, Template, compile_template, lookup_path, scan


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
    """Nodes grouped so that each depends only on earlier layers; one layer's nodes may run concurrently.

    Kahn's algorithm, layer by layer: linear in nodes plus edges (a 10,000-node chain is one pass).
    """
    deps = dependencies(flow)
    position = {node_id: index for index, node_id in enumerate(flow.nodes)}
    waiting_on = {node_id: len(ds) for node_id, ds in deps.items()}
    users: dict[str, list[str]] = {node_id: [] for node_id in deps}
    for node_id, ds in deps.items():
        for dep in ds:
            if dep not in users:
                raise ValueError(f"flow {flow.name!r}: node {node_id!r} depends on unknown node {dep!r}")
            users[dep].append(node_id)
    layer = [node_id for node_id, count in waiting_on.items() if count == 0]
    layers: list[list[str]] = []
    while layer:
        layers.append(layer)
        ready: list[str] = []
        for node_id in layer:
            for user in users[node_id]:
                waiting_on[user] -= 1
                if waiting_on[user] == 0:
                    ready.append(user)
        layer = sorted(ready, key=position.__getitem__)
    placed = sum(len(each) for each in layers)
    if placed < len(deps):
        stuck = [node_id for node_id, count in waiting_on.items() if count > 0]
        raise ValueError(f"flow {flow.name!r} has a dependency cycle among {len(stuck)} nodes, e.g. {stuck[:5]}")
    return layers


def find_cycles(deps: Mapping[str, Iterable[str]], limit: int = 10) -> tuple[list[list[str]], int]:
    """Dependency cycles as paths `[a, b, a]` (a waits for b, b for a): at most `limit` of them, and how many
    were found in all. Unknown ids are ignored.

    Not every elementary cycle is listed, but a graph with any cycle yields at least one. Iterative and
    linear in nodes plus edges (plus the length of the cycles kept), so a long chain cannot exhaust it.
    """
    order = {node_id: index for index, node_id in enumerate(deps)}
    ordered = {n: sorted((d for d in set(ds) if d in order), key=order.__getitem__) for n, ds in deps.items()}
    state = dict.fromkeys(deps, 0)  # 0 unvisited, 1 on the current path, 2 done
    on_path: dict[str, int] = {}  # node -> its index in `path`
    cycles: list[list[str]] = []
    found = 0
    for start in deps:
        if state[start]:
            continue
        path = [start]
        on_path[start] = 0
        stack = [iter(ordered[start])]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                done = path.pop()
                del on_path[done]
                state[done] = 2
                stack.pop()
            elif state[nxt] == 1:
                found += 1
                if len(cycles) < limit:
                    cycle = path[on_path[nxt] :]
                    pivot = cycle.index(min(cycle, key=order.__getitem__))
                    rotated = cycle[pivot:] + cycle[:pivot]
                    cycles.append([*rotated, rotated[0]])
            elif state[nxt] == 0:
                state[nxt] = 1
                on_path[nxt] = len(path)
                path.append(nxt)
                stack.append(iter(ordered[nxt]))
    return cycles, found


def compile_params(params: Mapping[str, Any]) -> Template:
    """A node's params compiled once (their strings parsed), for resolve_params to fill in run after run."""
    return compile_template(dict(params))


def resolve_params(
    params: Mapping[str, Any] | Template,
    inputs: Mapping[str, Any],
    outputs: Mapping[str, Any],
    max_bytes: int | None = None,
    output_sizes: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The params (as given, or compiled by compile_params) with every reference replaced by the run input
    or node output it names.

    Raises a non-retryable NodeError when a reference cannot be resolved (a path into an output that
    lacks it, or a node that has not produced an output), or when the referenced values together exceed
    `max_bytes`: a template naming a large output a hundred times must fail before it is built.
    `output_sizes` are the outputs' sizes already measured (by json_bytes): a whole output named is not
    measured again.
    """
    used = 0

    def lookup(ref: Reference) -> Any:
        nonlocal used
        source = inputs if ref.root == "inputs" else outputs
        try:
            found = source[ref.name]
            if ref.path:
                found = lookup_path(found, ref.path)
        except LookupError as exc:
            what = "input" if ref.root == "inputs" else "output of node"
            if isinstance(exc, KeyError):
                raise NodeError(f"{ref}: there is no {what} {ref.name!r}", retryable=False) from None
            raise NodeError(f"{ref}: in the {what} {ref.name!r}, {exc.args[0]}", retryable=False) from exc
        if max_bytes is not None:
            # A record without its size (0: no JSON text is empty) is measured, as is a part of an output.
            known = output_sizes.get(ref.name, 0) if output_sizes is not None and ref.root == "nodes" else 0
            used += known if known and not ref.path else json_bytes(found)
            if used > max_bytes:
                raise NodeError(
                    f"the params' references resolve to more than {format_bytes(max_bytes)} of data "
                    "(FIREFLOW_MAX_NODE_OUTPUT_BYTES)",
                    retryable=False,
                )
        # A copy: a node (user code in `python`) must not be able to change another node's output.
        return found if type(found) is str else _json_copy(found)

    template = params if callable(params) else compile_params(params)
    try:
        resolved: dict[str, Any] = template(lookup)
    except ReferenceSyntaxError as exc:
        raise NodeError(str(exc), retryable=False) from exc
    return resolved


def _json_copy(value: Any) -> Any:
    """A deep copy of a JSON value (an input or a node's output: nested at most MAX_NESTING_DEPTH levels),
    several times faster than copy.deepcopy, which handles any object graph."""
    if isinstance(value, dict):
        return {key: _json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_copy(item) for item in value]
    return value
