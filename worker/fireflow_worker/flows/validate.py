"""Turning a document into a checked Flow, and checking a run's inputs against it.

Every check runs even when others fail, so that one FlowValidationError lists all the problems, one line
each, naming the node (or input) and the field.
"""

from __future__ import annotations

import copy
import difflib
import os
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from fireflow_worker.flows.document import DocumentError, Loc, json_problems, loc_text, parse_text
from fireflow_worker.flows.graph import find_cycles, node_dependencies
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
from fireflow_worker.flows.refs import ReferenceSyntaxError, has_reference, json_kind, scan
from fireflow_worker.flows.registry import NodeRegistry, default_registry

M = TypeVar("M", bound=BaseModel)
_SCALARS = {InputType.STRING, InputType.NUMBER, InputType.INTEGER, InputType.BOOLEAN}


class FlowValidationError(ValueError):
    """A flow or a run's inputs are invalid; str() is one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


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
    if json_issues := json_problems(dict(data)):
        raise FlowValidationError(json_issues)
    problems: list[str] = []
    flow: Flow | None = None
    try:
        flow = Flow.model_validate(dict(data))
    except ValidationError as exc:
        problems += [_flow_error_line(error) for error in exc.errors()]
    parts = _Parts.of_flow(flow) if flow is not None else _Parts.salvage(data)
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


def validate_flow(flow: Flow, registry: NodeRegistry | None = None) -> None:
    """The semantic checks of load_flow, for a Flow built in code."""
    if problems := _check(_Parts.of_flow(flow), registry if registry is not None else default_registry()):
        raise FlowValidationError(problems)


def validate_run_inputs(flow: Flow, inputs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The run's inputs, checked against the declarations, with defaults applied, in declaration order.

    An explicit null is accepted only for optional inputs and inputs of type any.
    """
    supplied = dict(inputs or {})
    declared = ", ".join(flow.inputs) or "none"
    problems = [
        f"input {name!r} is not declared by flow {flow.name!r} (declared: {declared})"
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
        if value is None and (not spec.required or spec.type is InputType.ANY):
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
class _Parts:
    """What the semantic checks need; from a Flow, or salvaged from data the Flow model rejected."""

    node_ids: list[str]  # every id, including those whose spec is invalid
    nodes: dict[str, NodeSpec]
    inputs: dict[str, InputSpec | None]  # None: declared, but its spec is invalid
    outputs: list[str] | None
    # Nodes whose params are not a mapping: checking the empty params that stand in would report them missing.
    unreadable_params: set[str]

    @classmethod
    def of_flow(cls, flow: Flow) -> _Parts:
        return cls(list(flow.nodes), dict(flow.nodes), dict(flow.inputs), flow.outputs, set())

    @classmethod
    def salvage(cls, data: Mapping[str, Any]) -> _Parts:
        # The model's own errors are already reported; keep what parses so the other checks still run.
        raw_nodes = data.get("nodes")
        raw_nodes = raw_nodes if isinstance(raw_nodes, dict) else {}
        raw_inputs = data.get("inputs")
        raw_inputs = raw_inputs if isinstance(raw_inputs, dict) else {}
        outputs = data.get("outputs")
        valid_outputs = isinstance(outputs, list) and all(isinstance(item, str) for item in outputs)
        nodes = {node_id: spec for node_id, raw in raw_nodes.items() if (spec := _parse(NodeSpec, raw)) is not None}
        inputs = {name: _parse(InputSpec, raw) for name, raw in raw_inputs.items()}
        unreadable = {
            node_id
            for node_id, raw in raw_nodes.items()
            if isinstance(raw, dict) and not isinstance(raw.get("params", {}), dict)
        }
        return cls(list(raw_nodes), nodes, inputs, outputs if valid_outputs else None, unreadable)


def _parse(model: type[M], raw: Any) -> M | None:
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


def _check(parts: _Parts, registry: NodeRegistry) -> list[str]:
    problems = [
        f"input {name!r}: the name must match {INPUT_NAME_PATTERN}"
        for name in parts.inputs
        if not INPUT_NAME_RE.fullmatch(name)
    ]
    for node_id in parts.node_ids:
        if not NODE_ID_RE.fullmatch(node_id):
            problems.append(f"node {node_id!r}: the id must match {NODE_ID_PATTERN}")
        if (node := parts.nodes.get(node_id)) is not None:
            problems += _check_node(node_id, node, parts, registry)
    deps = {node_id: node_dependencies(node) for node_id, node in parts.nodes.items()}
    problems += [f"dependency cycle: {' -> '.join(cycle)} (each waits for the next)" for cycle in find_cycles(deps)]
    seen: set[str] = set()
    for output in parts.outputs or []:
        if output not in parts.node_ids:
            problems.append(f"outputs: unknown node {output!r}{_suggest(output, parts.node_ids)}")
        elif output in seen:
            problems.append(f"outputs: node {output!r} is listed twice")
        seen.add(output)
    return problems


def _check_node(node_id: str, node: NodeSpec, parts: _Parts, registry: NodeRegistry) -> list[str]:
    prefix = f"node {node_id!r}"
    problems: list[str] = []
    if node.type not in registry:
        problems.append(f"{prefix}: type: unknown node type {node.type!r} (known: {', '.join(registry.names())})")
    elif node_id not in parts.unreadable_params:
        problems += _check_params(prefix, registry.get(node.type), node.params)
    for loc, found in scan(node.params, ("params",)):
        where = f"{prefix}: {loc_text(loc)}"
        if isinstance(found, ReferenceSyntaxError):
            problems.append(f"{where}: {found}")
        elif found.root == "nodes" and found.name not in parts.node_ids:
            problems.append(f"{where}: {found} names unknown node {found.name!r}{_suggest(found.name, parts.node_ids)}")
        elif found.root == "inputs" and found.name not in parts.inputs:
            declared = ", ".join(parts.inputs) or "none"
            problems.append(f"{where}: {found} names undeclared input {found.name!r} (declared: {declared})")
        elif found.root == "inputs" and found.path and (scalar := _scalar_type(parts.inputs[found.name])):
            problems.append(f"{where}: {found} reads a field of input {found.name!r}, which is a {scalar}")
    problems += [
        f"{prefix}: after: unknown node {dep!r}{_suggest(dep, parts.node_ids)}"
        for dep in node.after
        if dep not in parts.node_ids
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
            _error_line(prefix, tuple(error["loc"]), error, node_type.Params, shown_under=("params",))
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


def _flow_error_line(error: ErrorDetails) -> str:
    loc: Loc = tuple(error["loc"])
    if len(loc) >= 2 and loc[0] == "nodes":
        return _error_line(f"node {loc[1]!r}", loc[2:], error, NodeSpec)
    if len(loc) >= 2 and loc[0] == "inputs":
        return _error_line(f"input {loc[1]!r}", loc[2:], error, InputSpec)
    if loc == ("nodes",) and error["type"] == "too_short":
        return "nodes: a flow needs at least one node"
    return _error_line("", loc, error, Flow)


def _error_line(prefix: str, loc: Loc, error: ErrorDetails, model: type[BaseModel], shown_under: Loc = ()) -> str:
    """`prefix: field: message`, where `loc` is where the error is inside `model` (for its field names)."""
    kind = error["type"]
    if kind == "missing":
        message = "is required"
    elif kind == "extra_forbidden":
        known = _fields_at(model, loc[:-1])
        message = "is not a known field" + (f" (known: {', '.join(known)})" if known else "")
    else:
        message = str(error["msg"]).removeprefix("Value error, ")
        if isinstance(error.get("input"), str | int | float | bool) and kind not in ("value_error", "assertion_error"):
            shown = repr(error["input"])
            message += f" (got {shown if len(shown) <= 60 else shown[:57] + '...'})"
    field = loc_text((*shown_under, *loc))
    return ": ".join(part for part in (prefix, field, message) if part)


def _fields_at(model: type[BaseModel], loc: Loc) -> list[str] | None:
    """The field names (as written in a flow) of the model found at `loc` inside `model`, if it is one."""
    annotation: Any = model
    for part in loc:
        annotation = _strip_optional(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            fields = {field.alias or name: field for name, field in annotation.model_fields.items()}
            if part not in fields:
                return None
            annotation = fields[str(part)].annotation
        elif get_origin(annotation) in (dict, list):
            annotation = get_args(annotation)[-1]
        else:
            return None
    annotation = _strip_optional(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [field.alias or name for name, field in annotation.model_fields.items()]
    return None


def _strip_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def _suggest(name: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
