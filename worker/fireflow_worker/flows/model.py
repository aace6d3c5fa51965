"""The flow document as pydantic models: a named DAG of typed nodes (the format is documented in docs/flows.md).

These models check the *shape* of a flow. What it means (known node types, their params, references,
cycles) is checked by `validate.load_flow`, which is the way to obtain a `Flow`.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

FLOW_NAME_PATTERN = r"^[a-z0-9._-]{1,128}$"
NODE_ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"
# Input names follow the node-id rule so that `${inputs.NAME}` and `${nodes.ID}` parse alike.
INPUT_NAME_PATTERN = NODE_ID_PATTERN
NODE_ID_RE = re.compile(NODE_ID_PATTERN)
INPUT_NAME_RE = NODE_ID_RE


class RetryPolicy(BaseModel):
    """How often a node is attempted; the wait before attempt n+1 is interval * backoff_rate**(n-1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_attempts: int = Field(default=1, ge=1, le=20)
    interval_seconds: float = Field(default=1.0, ge=0, le=3600)
    backoff_rate: float = Field(default=2.0, ge=1, le=10)


class InputType(StrEnum):
    STRING = "string"
    NUMBER = "number"
    INTEGER = "integer"
    BOOLEAN = "boolean"
    OBJECT = "object"
    ARRAY = "array"
    ANY = "any"


def type_problem(value: Any, expected: InputType) -> str | None:
    """Why `value` is not of the JSON type `expected`, or None when it is."""
    # bool is an int subclass in Python but never a number in JSON.
    ok = {
        InputType.STRING: isinstance(value, str),
        InputType.NUMBER: isinstance(value, int | float) and not isinstance(value, bool),
        InputType.INTEGER: (isinstance(value, int) and not isinstance(value, bool))
        or (isinstance(value, float) and value.is_integer()),
        InputType.BOOLEAN: isinstance(value, bool),
        InputType.OBJECT: isinstance(value, dict),
        InputType.ARRAY: isinstance(value, list),
        InputType.ANY: True,
    }[expected]
    if ok and isinstance(value, float) and not math.isfinite(value):
        ok = False
    return None if ok else f"{_short(value)} is not of type {expected.value}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class InputSpec(BaseModel):
    """A declared run input. It is required unless it has a default (or says `required: false`)."""

    model_config = ConfigDict(extra="forbid")

    type: InputType = InputType.ANY
    description: str | None = None
    # An optional input that is not supplied takes this value (null when none is given).
    default: Any = None
    required: bool = True
    # A sample value for documentation and demos; never used by a run.
    example: Any = None

    @model_validator(mode="before")
    @classmethod
    def _required_unless_default(cls, data: Any) -> Any:
        # Resolved here, not left implicit, so that model_dump() -> model_validate() round-trips.
        if isinstance(data, dict) and "required" not in data:
            return {**data, "required": "default" not in data}
        return data

    @model_validator(mode="after")
    def _values_fit(self) -> InputSpec:
        if self.default is not None and self.required:
            raise ValueError("a required input cannot have a default")
        for field in ("default", "example"):
            value = getattr(self, field)
            if value is not None and (problem := type_problem(value, self.type)):
                raise ValueError(f"{field} {problem}")
        return self


class NodeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: str = Field(min_length=1)
    description: str | None = None
    # Literal JSON values and `${...}` references, checked against the type's Params model.
    params: dict[str, Any] = Field(default_factory=dict)
    # None = the node type's own default policy.
    retry: RetryPolicy | None = None
    # Ordering without data: this node starts only after these have finished.
    after: list[str] = Field(default_factory=list)


class Flow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=FLOW_NAME_PATTERN)
    description: str | None = None
    inputs: dict[str, InputSpec] = Field(default_factory=dict)
    # Insertion order is kept and used to order layers and problems deterministically.
    nodes: dict[str, NodeSpec] = Field(min_length=1)
    # None = the terminal nodes (those nothing depends on).
    outputs: list[str] | None = None
