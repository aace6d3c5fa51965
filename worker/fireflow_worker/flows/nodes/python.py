"""`python`: calls `module:function(**kwargs)` from a module the operator allowed.

The allow-list is the env var FIREFLOW_PYTHON_NODE_MODULES: comma-separated module names, each allowing
itself and its submodules (`acme` allows `acme` and `acme.jobs`, not `acme_extra`). Empty or unset allows
nothing, so a flow author cannot call arbitrary code unless the worker's operator opted in.
"""

from __future__ import annotations

import importlib
import os
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fireflow_worker.flows.nodetype import NodeContext, NodeError, NodeType

ALLOW_LIST_ENV = "FIREFLOW_PYTHON_NODE_MODULES"
# One public name after the colon: no attribute chains and no dunders to climb out of the module.
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_FUNCTION = re.compile(rf"(?P<module>{_IDENTIFIER}(?:\.{_IDENTIFIER})*):(?P<name>[A-Za-z][A-Za-z0-9_]*)")


def allowed_modules() -> list[str]:
    """Read at each check, so the worker's environment is what counts."""
    return [entry.strip() for entry in os.environ.get(ALLOW_LIST_ENV, "").split(",") if entry.strip()]


def is_allowed(module: str, allowed: list[str]) -> bool:
    return any(module == entry or module.startswith(entry + ".") for entry in allowed)


def check_function(function: str, *, when_unset: bool = True) -> tuple[str, str]:
    """Split `module:function` and check it against the allow-list; raises ValueError.

    `when_unset=False` skips the allow-list where the variable is not set at all: a client validating a
    flow before enqueue does not know the workers' allow-list, which they enforce when the node runs.
    """
    match = _FUNCTION.fullmatch(function)
    if match is None:
        raise ValueError("must be 'package.module:function' (a public function name, no attribute chain)")
    module = match["module"]
    if not when_unset and ALLOW_LIST_ENV not in os.environ:
        return module, match["name"]
    allowed = allowed_modules()
    if not is_allowed(module, allowed):
        listed = ", ".join(allowed) if allowed else "nothing (it is empty)"
        raise ValueError(f"module {module!r} is not allowed by {ALLOW_LIST_ENV}, which allows {listed}")
    return module, match["name"]


class PythonParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    function: str
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @field_validator("function")
    @classmethod
    def _allowed(cls, function: str) -> str:
        check_function(function, when_unset=False)
        return function


class PythonNode(NodeType[PythonParams]):
    name = "python"
    Params = PythonParams

    def run(self, params: PythonParams, ctx: NodeContext) -> Any:
        try:
            module_name, name = check_function(params.function)  # again: params may be built directly
        except ValueError as exc:
            raise NodeError(f"{params.function}: {exc}", retryable=False) from exc
        try:
            function = getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError) as exc:
            raise NodeError(f"{params.function} cannot be imported: {exc}", retryable=False) from exc
        if not callable(function):
            raise NodeError(f"{params.function} is not callable", retryable=False)
        try:
            return function(**params.kwargs)
        except Exception as exc:
            # The callable is user code: any failure of it is this node's failure, recorded by the engine.
            raise NodeError(f"{params.function} raised {type(exc).__name__}: {exc}") from exc
