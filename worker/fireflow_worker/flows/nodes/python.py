"""`python`: calls `module:function(**kwargs)` from a module the operator allowed.

The allow-list is the env var FIREFLOW_PYTHON_NODE_MODULES: comma-separated module names, each allowing
itself and its submodules (`acme` allows `acme` and `acme.jobs`, not `acme_extra`). Empty or unset allows
nothing, so a flow author cannot call arbitrary code unless the worker's operator opted in.

What `module:function` names must be a plain function *defined* in an allowed module: a name the module
merely imports (`from subprocess import getoutput`) is someone else's function and is refused, and so are
classes, builtins, callable objects, coroutine and generator functions.

Both checks, and the import and look-up of the function, are made once per function and allow-list in a
process, not at every attempt (they cost a `python` node about 20 us an attempt): what passed is
remembered, keyed by the spec and the variable's exact value; a refusal is not, so it is said every time.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from fireflow_worker.flows.nodetype import AT_RUN, NodeContext, NodeError, NodeType

ALLOW_LIST_ENV = "FIREFLOW_PYTHON_NODE_MODULES"
# One public name after the colon: no attribute chains and no dunders to climb out of the module.
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_FUNCTION = re.compile(rf"(?P<module>{_IDENTIFIER}(?:\.{_IDENTIFIER})*):(?P<name>[A-Za-z][A-Za-z0-9_]*)")
# The functions (and specs) remembered as checked: a worker calls a few, a bound keeps a flood of specs small.
MAX_REMEMBERED = 1024


def allowed_modules(value: str | None = None) -> list[str]:
    """The modules the variable's `value` (by default its value now) allows."""
    value = os.environ.get(ALLOW_LIST_ENV, "") if value is None else value
    return [entry.strip() for entry in value.split(",") if entry.strip()]


def is_allowed(module: str, allowed: list[str]) -> bool:
    return any(module == entry or module.startswith(entry + ".") for entry in allowed)


def check_function(function: str, *, when_unset: bool = True) -> tuple[str, str]:
    """Split `module:function` and check it against the allow-list; raises ValueError.

    `when_unset=False` skips the allow-list where the variable is not set at all: a client validating a
    flow before enqueue does not know the workers' allow-list, which they enforce when the node runs.
    """
    value = os.environ.get(ALLOW_LIST_ENV)
    return _checked(function, value if value is not None or when_unset else None)


@functools.lru_cache(maxsize=MAX_REMEMBERED)
def _checked(function: str, allow_list: str | None) -> tuple[str, str]:
    """check_function against the variable's value (None: unset, and not checked)."""
    match = _FUNCTION.fullmatch(function)
    if match is None:
        raise ValueError("must be 'package.module:function' (a public function name, no attribute chain)")
    module = match["module"]
    if allow_list is None:
        return module, match["name"]
    allowed = allowed_modules(allow_list)
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
    def _allowed(cls, function: str, info: ValidationInfo) -> str:
        if info.context is AT_RUN:  # the attempt's `run` checks the allow-list: the form alone here
            _checked(function, None)
        else:
            check_function(function, when_unset=False)
        return function


class PythonNode(NodeType[PythonParams]):
    name = "python"
    Params = PythonParams

    def run(self, params: PythonParams, ctx: NodeContext) -> Any:
        allow_list = os.environ.get(ALLOW_LIST_ENV, "")
        try:
            module_name, name = _checked(params.function, allow_list)  # again: params may be built directly
        except ValueError as exc:
            raise NodeError(f"{params.function}: {exc}", retryable=False) from exc
        function = resolve_function(params.function, module_name, name, allow_list)
        try:
            return function(**params.kwargs)
        except BaseException as exc:  # SystemExit, KeyboardInterrupt... fail this node too
            # The callable is user code: whatever it raises fails this node and nothing else.
            raise NodeError(f"{params.function} raised {type(exc).__name__}: {exc}") from exc


@functools.lru_cache(maxsize=MAX_REMEMBERED)
def resolve_function(spec: str, module_name: str, name: str, allow_list: str) -> Callable[..., Any]:
    """The plain function `name` defined in `module_name` or a module `allow_list` also allows."""
    try:
        found = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise NodeError(f"{spec} cannot be imported: {exc}", retryable=False) from exc
    if not inspect.isfunction(found):
        what = "a class" if inspect.isclass(found) else f"an object of type {type(found).__name__}"
        raise NodeError(f"{spec} is {what}, not a function defined in an allowed module", retryable=False)
    defined_in = str(getattr(found, "__module__", ""))
    if not is_allowed(defined_in, allowed_modules(allow_list)):
        raise NodeError(
            f"{spec} is defined in module {defined_in!r}, which {ALLOW_LIST_ENV} does not allow "
            f"(a name imported into an allowed module is not allowed with it)",
            retryable=False,
        )
    if inspect.iscoroutinefunction(found) or inspect.isgeneratorfunction(found) or inspect.isasyncgenfunction(found):
        raise NodeError(f"{spec} is a coroutine or generator function; it must return its result", retryable=False)
    return found
