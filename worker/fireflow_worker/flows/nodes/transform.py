"""`transform`: builds a value from `value` (usually references) and a list of operations applied in order.

Each operation is a one-key object (`{pick: [a, b]}`), or a bare name for those without an argument
(`length`). The set is closed and data-only: there is no expression language and nothing is evaluated.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fireflow_worker.flows.nodetype import NodeContext, NodeError, NodeType
from fireflow_worker.flows.refs import as_text, json_kind, lookup_path, parse_path


class Op(BaseModel):
    """One operation; exactly one field is set (checked before field validation)."""

    model_config = ConfigDict(extra="forbid")

    get: str | None = None  # the value at a path: "a.b.0"
    pick: list[str] | None = None  # an object with only these keys
    omit: list[str] | None = None  # an object without these keys
    rename: dict[str, str] | None = None  # an object with keys renamed old -> new
    merge: dict[str, Any] | None = None  # an object with these fields added or replaced
    merge_all: Literal[True] | None = None  # a list of objects merged into one, later ones winning
    map: list[Op] | None = None  # a list with these operations applied to each item
    where: dict[str, Any] | None = None  # a list of the objects whose paths equal these values
    keys: Literal[True] | None = None  # an object's keys
    values: Literal[True] | None = None  # an object's values
    length: Literal[True] | None = None  # the length of a list, object or string
    flatten: Literal[True] | None = None  # a list of lists joined into one list
    join: str | None = None  # a list joined into a string with this separator
    sum: Literal[True] | None = None  # the sum of a list of numbers
    default: Any = None  # this value when the current one is null
    parse_json: Literal[True] | None = None  # a string parsed as JSON

    @model_validator(mode="before")
    @classmethod
    def _one_operation(cls, data: Any) -> Any:
        if isinstance(data, str):
            data = {data: True}
        if not isinstance(data, dict) or len(data) != 1:
            raise ValueError("an operation is one name, or an object with exactly one key, e.g. {pick: [a]}")
        (name,) = data
        if name not in cls.model_fields:
            raise ValueError(f"unknown operation {name!r} (known: {', '.join(cls.model_fields)})")
        if data[name] is None and name != "default":
            raise ValueError(f"operation {name!r} needs an argument, not null")
        return data

    def apply(self, value: Any) -> Any:
        (name,) = self.model_fields_set
        return _OPERATIONS[name](value, getattr(self, name))


class TransformParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    value: Any = None
    ops: list[Op] = Field(default_factory=list)


class TransformNode(NodeType[TransformParams]):
    name = "transform"
    Params = TransformParams
    pure = True  # closed, data-only operations: the same params always give the same value

    def run(self, params: TransformParams, ctx: NodeContext) -> Any:
        value = params.value
        for index, op in enumerate(params.ops):
            try:
                value = op.apply(value)
            except (LookupError, TypeError, ValueError) as exc:
                (name,) = op.model_fields_set
                raise NodeError(f"ops[{index}] ({name}): {exc}", retryable=False) from exc
        return value


_KIND_NAMES: dict[type, str] = {dict: "an object", list: "a list", str: "a string"}


def _need(value: Any, kind: type, op: str) -> Any:
    if not isinstance(value, kind):
        raise TypeError(f"{op} needs {_KIND_NAMES[kind]}, got {json_kind(value)}")
    return value


def _get(value: Any, path: str) -> Any:
    return lookup_path(value, parse_path(path))


def _where(value: Any, match: dict[str, Any]) -> list[Any]:
    def matches(item: Any) -> bool:
        for path, expected in match.items():
            try:
                if lookup_path(item, parse_path(path)) != expected:
                    return False
            except LookupError:
                return False
        return True

    return [item for item in _need(value, list, "where") if matches(item)]


def _merge_all(value: Any, _: Any) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for item in _need(value, list, "merge_all"):
        merged.update(_need(item, dict, "merge_all (each item)"))
    return merged


def _sum(value: Any, _: Any) -> int | float:
    items = _need(value, list, "sum")
    for item in items:
        if not isinstance(item, int | float) or isinstance(item, bool):
            raise TypeError(f"sum needs numbers, got {json_kind(item)}")
    total: int | float = sum(items)
    return total


def _length(value: Any, _: Any) -> int:
    if isinstance(value, list | dict | str):
        return len(value)
    raise TypeError(f"length needs a list, an object or a string, got {json_kind(value)}")


_OPERATIONS: dict[str, Callable[[Any, Any], Any]] = {
    "get": _get,
    "pick": lambda v, keys: {k: x for k, x in _need(v, dict, "pick").items() if k in keys},
    "omit": lambda v, keys: {k: x for k, x in _need(v, dict, "omit").items() if k not in keys},
    "rename": lambda v, names: {names.get(k, k): x for k, x in _need(v, dict, "rename").items()},
    "merge": lambda v, fields: {**_need(v, dict, "merge"), **fields},
    "merge_all": _merge_all,
    "map": lambda v, ops: [_apply_all(ops, item) for item in _need(v, list, "map")],
    "where": _where,
    "keys": lambda v, _: list(_need(v, dict, "keys")),
    "values": lambda v, _: list(_need(v, dict, "values").values()),
    "length": _length,
    "flatten": lambda v, _: [y for x in _need(v, list, "flatten") for y in (x if isinstance(x, list) else [x])],
    "join": lambda v, sep: sep.join(as_text(x) for x in _need(v, list, "join")),
    "sum": _sum,
    "default": lambda v, fallback: fallback if v is None else v,
    "parse_json": lambda v, _: json.loads(_need(v, str, "parse_json")),
}


def _apply_all(ops: list[Op], value: Any) -> Any:
    for op in ops:
        value = op.apply(value)
    return value
