"""How validation problems are worded: one line each, naming the node (or input) and the field, and a
"did you mean" for a misspelt name."""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterable
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from fireflow_worker.flows.document import Loc, loc_text
from fireflow_worker.flows.model import Flow, InputSpec, NodeSpec

# Each suggestion compares a name with every candidate; past this many, a huge flow with many misspelt names
# would make validation quadratic, so the remaining problems are reported without a suggestion.
_SUGGESTIONS_PER_CHECK = 50


def flow_error_line(error: ErrorDetails) -> str:
    loc: Loc = tuple(error["loc"])
    if len(loc) >= 2 and loc[0] == "nodes":
        return error_line(f"node {loc[1]!r}", loc[2:], error, NodeSpec)
    if len(loc) >= 2 and loc[0] == "inputs":
        return error_line(f"input {loc[1]!r}", loc[2:], error, InputSpec)
    if loc == ("nodes",) and error["type"] == "too_short":
        return "nodes: a flow needs at least one node"
    return error_line("", loc, error, Flow)


def error_line(prefix: str, loc: Loc, error: ErrorDetails, model: type[BaseModel], shown_under: Loc = ()) -> str:
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


class Suggester:
    """`(did you mean 'x'?)` for the first few misspelt names of one validation."""

    def __init__(self, budget: int = _SUGGESTIONS_PER_CHECK) -> None:
        self._budget = budget

    def __call__(self, name: str, candidates: Iterable[str]) -> str:
        if self._budget <= 0:
            return ""
        self._budget -= 1
        close = difflib.get_close_matches(name, list(candidates), n=1)
        return f" (did you mean {close[0]!r}?)" if close else ""
