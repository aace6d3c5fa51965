"""Turning a document into a checked Flow, and checking a run's inputs against it.

Every check runs even when others fail, so that one FlowValidationError lists all the problems, one line
each, naming the node (or input) and the field.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fireflow_worker.flows.document import DocumentError, Loc, json_problems, loc_text, parse_text
from fireflow_worker.flows.graph import find_cycles, node_dependencies
from fireflow_worker.flows.limits import MAX_FLOW_NODES_ENV, max_flow_nodes, nesting_problem
from fireflow_worker.flows.messages import Suggester, error_line, flow_error_line
from fireflow_worker.flows.model import (
    INPUT_NAME_PATTERN,
    INPUT_NAME_RE,
    NODE_ID_PATTERN,
    NODE_ID_RE,
    Flow,
    InputSpec,
    InputType,
    NodeSpec,
    type_problem,
)
from fireflow_worker.flows.nodetype import AnyNodeType
from fireflow_worker.flows.parts import FlowParts
from fireflow_worker.flows.refs import ReferenceSyntaxError, has_reference, json_kind, scan
from fireflow_worker.flows.registry import NodeRegistry, default_registry

_SCALARS = {InputType.STRING, InputType.NUMBER, InputType.INTEGER, InputType.BOOLEAN}


# A flow with thousands of broken nodes reads best as its first problems and a count of the rest.
_PROBLEMS_SHOWN = 100


class FlowValidationError(ValueError):
    """A flow or a run's inputs are invalid; str() is one line per problem (the first 100, then a count)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        shown = self.problems[:_PROBLEMS_SHOWN]
        if len(self.problems) > _PROBLEMS_SHOWN:
            shown.append(f"... and {len(self.problems) - _PROBLEMS_SHOWN} more problems")
        super().__init__("\n".join(shown))

    def __reduce__(self) -> tuple[type[FlowValidationError], tuple[list[str]]]:
        # Rebuilt from its problems, not from str(): DBOS pickles a step's error and raises the copy.
        return (type(self), (self.problems,))

    def one_line(self) -> str:
        """The problems joined into one sentence, for a run's error and its `run.failed` event."""
        return "; ".join(str(self).split("\n"))


def load_flow(source: str | bytes | Mapping[str, Any], registry: NodeRegistry | None = None) -> Flow:
    """Parse YAML/JSON text (or take already-parsed data) and check it completely."""
    if isinstance(source, bytes):
        try:
            source = source.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FlowValidationError([f"the flow document is not UTF-8: {exc}"]) from None
    try:
        data = parse_text(source) if isinstance(source, str) else source
    except DocumentError as exc:
        raise FlowValidationError([str(exc)]) from None
    if not isinstance(data, Mapping):
        raise FlowValidationError([f"a flow is a mapping with at least name and nodes, got {json_kind(data)}"])
    if too_deep := nesting_problem(dict(data), where="the document"):
        raise FlowValidationError([too_deep])
    if json_issues := json_problems(dict(data)):
        raise FlowValidationError(json_issues)
    problems: list[str] = []
    flow: Flow | None = None
    try:
        flow = Flow.model_validate(dict(data))
    except ValidationError as exc:
        problems += [flow_error_line(error) for error in exc.errors()]
    parts = FlowParts.of_flow(flow) if flow is not None else FlowParts.salvage(data)
    problems += _check(parts, registry if registry is not None else default_registry())
    if problems or flow is None:
        raise FlowValidationError(problems)
    return flow


def load_flow_file(path: str | os.PathLike[str], registry: NodeRegistry | None = None) -> Flow:
    """load_flow on a file; each problem line starts with the file's path."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FlowValidationError([f"{path}: cannot read the flow: {exc}"]) from None
    try:
        return load_flow(text, registry)
    except FlowValidationError as exc:
        raise FlowValidationError([f"{path}: {problem}" for problem in exc.problems]) from None


def read_flow_file(path: str | Path) -> dict[str, Any]:
    """Parse a YAML or JSON flow file into its definition (validated later, as a whole)."""
    try:
        data = parse_text(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise FlowValidationError([f"{path}: cannot read the flow: {err}"]) from None
    except DocumentError as err:
        raise FlowValidationError([f"{path}: {err}"]) from None
    if not isinstance(data, dict):
        raise FlowValidationError([f"{path}: a flow must be a mapping, got {type(data).__name__}"])
    return data


def validate_flow(flow: Flow, registry: NodeRegistry | None = None) -> None:
    """The semantic checks of load_flow, for a Flow built in code."""
    if problems := _check(FlowParts.of_flow(flow), registry if registry is not None else default_registry()):
        raise FlowValidationError(problems)


# The declared types a string input satisfies.
_TAKES_STRINGS = frozenset((InputType.STRING, InputType.ANY))


def validate_run_inputs(flow: Flow, inputs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The run's inputs, checked against the declarations, with defaults applied, in declaration order.

    An explicit null is accepted only for optional inputs and inputs of type any.
    """
    supplied = dict(inputs or {})
    problems = [
        f"input {name!r} is not declared by flow {flow.name!r} (declared: {', '.join(flow.inputs) or 'none'})"
        for name in supplied
        if name not in flow.inputs
    ]
    result: dict[str, Any] = {}
    for name, spec in flow.inputs.items():
        if name not in supplied:
            if spec.required:
                problems.append(f"input {name!r} is required (type {spec.type.value})")
            else:
                result[name] = copy.deepcopy(spec.default)
            continue
        value = supplied[name]
        if type(value) is str and spec.type in _TAKES_STRINGS:  # the common case, which no check below rejects
            result[name] = value
        elif too_deep := nesting_problem(value, where=f"input {name!r}"):
            problems.append(too_deep)
        elif value is None and (not spec.required or spec.type is InputType.ANY):
            result[name] = None
        elif problem := type_problem(value, spec.type):
            problems.append(f"input {name!r}: {problem}")
        elif json_issues := json_problems(value, (name,)):
            problems += [f"input {issue}" for issue in json_issues]
        else:
            # JSON readers may give 3.0 for an integer; the flow sees the int it declared.
            result[name] = int(value) if spec.type is InputType.INTEGER else value
    if problems:
        raise FlowValidationError(problems)
    return result


@dataclass
class _Context:
    """What every node's checks share: the ids as a set (membership in O(1)) and one suggestion budget."""

    parts: FlowParts
    registry: NodeRegistry
    ids: set[str]
    declared_inputs: str
    suggest: Suggester

    @classmethod
    def of(cls, parts: FlowParts, registry: NodeRegistry) -> _Context:
        names = list(parts.inputs)
        declared = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
        return cls(parts, registry, set(parts.node_ids), declared or "none", Suggester())


def _check(parts: FlowParts, registry: NodeRegistry) -> list[str]:
    problems = [
        f"input {name!r}: the name must match {INPUT_NAME_PATTERN}"
        for name in parts.inputs
        if not INPUT_NAME_RE.fullmatch(name)
    ]
    try:
        limit = max_flow_nodes()
    except ValueError as exc:
        problems.append(str(exc))
    else:
        if (count := len(parts.node_ids)) > limit:
            problems.append(f"nodes: {count} nodes, more than the limit of {limit} ({MAX_FLOW_NODES_ENV})")
    context = _Context.of(parts, registry)
    for node_id in parts.node_ids:
        if not NODE_ID_RE.fullmatch(node_id):
            problems.append(f"node {node_id!r}: the id must match {NODE_ID_PATTERN}")
        if (node := parts.nodes.get(node_id)) is not None:
            problems += _check_node(node_id, node, context)
    deps = {node_id: node_dependencies(node) for node_id, node in parts.nodes.items()}
    cycles, found = find_cycles(deps)
    problems += [f"dependency cycle: {' -> '.join(cycle)} (each waits for the next)" for cycle in cycles]
    if found > len(cycles):
        problems.append(f"... and {found - len(cycles)} more dependency cycles")
    seen: set[str] = set()
    for output in parts.outputs or []:
        if output not in context.ids:
            problems.append(f"outputs: unknown node {output!r}{context.suggest(output, parts.node_ids)}")
        elif output in seen:
            problems.append(f"outputs: node {output!r} is listed twice")
        seen.add(output)
    return problems


def _check_node(node_id: str, node: NodeSpec, context: _Context) -> list[str]:
    prefix = f"node {node_id!r}"
    parts, registry, ids = context.parts, context.registry, context.ids
    problems: list[str] = []
    if node.type not in registry:
        problems.append(f"{prefix}: type: unknown node type {node.type!r} (known: {', '.join(registry.names())})")
    elif node_id not in parts.unreadable_params:
        problems += _check_params(prefix, registry.get(node.type), node.params)
    for loc, found in scan(node.params, ("params",)):
        where = f"{prefix}: {loc_text(loc)}"
        if isinstance(found, ReferenceSyntaxError):
            problems.append(f"{where}: {found}")
        elif found.root == "nodes" and found.name not in ids:
            suggestion = context.suggest(found.name, parts.node_ids)
            problems.append(f"{where}: {found} names unknown node {found.name!r}{suggestion}")
        elif found.root == "inputs" and found.name not in parts.inputs:
            declared = context.declared_inputs
            problems.append(f"{where}: {found} names undeclared input {found.name!r} (declared: {declared})")
        elif found.root == "inputs" and found.path and (scalar := _scalar_type(parts.inputs[found.name])):
            problems.append(f"{where}: {found} reads a field of input {found.name!r}, which is a {scalar}")
    problems += [
        f"{prefix}: after: unknown node {dep!r}{context.suggest(dep, parts.node_ids)}"
        for dep in node.after
        if dep not in ids
    ]
    return problems


def _scalar_type(spec: InputSpec | None) -> str | None:
    return spec.type.value if spec is not None and spec.type in _SCALARS else None


def _check_params(prefix: str, node_type: AnyNodeType, params: dict[str, Any]) -> list[str]:
    """Validate the literal parts: an error at (or inside) a string holding a reference waits for run time."""
    try:
        node_type.Params.model_validate(params)
    except ValidationError as exc:
        return [
            error_line(prefix, tuple(error["loc"]), error, node_type.Params, shown_under=("params",))
            for error in exc.errors()
            if not _at_reference(params, error["loc"])
        ]
    return []


def _at_reference(raw: Any, loc: Loc) -> bool:
    value = raw
    for part in loc:
        if isinstance(value, str):
            break
        in_dict = isinstance(value, dict) and part in value
        if in_dict or (isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value)):
            value = value[part]
        # Otherwise `part` is a union tag or a missing field: stay on the current value.
    return isinstance(value, str) and has_reference(value)
