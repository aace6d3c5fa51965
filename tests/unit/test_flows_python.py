"""The `python` node: only plain functions defined in an allowed module, called with the kwargs; whatever
they raise fails the node."""

from __future__ import annotations

import importlib
import re
import time
from typing import Any

import pytest

from fireflow_worker.flows.nodes import PythonNode
from fireflow_worker.flows.nodes import python as python_node
from fireflow_worker.flows.nodes.python import PythonParams
from fireflow_worker.flows.nodetype import AnyNodeType, NodeContext, NodeError, parse_params, run_node


def ctx() -> NodeContext:
    return NodeContext(run_id="run-1", node_id="n", sleeper=time.sleep)


def run(node_type: AnyNodeType, params: dict[str, Any], context: NodeContext | None = None) -> Any:
    return run_node(node_type, parse_params(node_type, params), context or ctx())


@pytest.fixture
def allow_stdlib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIREFLOW_PYTHON_NODE_MODULES", "json,textwrap, datetime ,os.path")


@pytest.mark.usefixtures("allow_stdlib")
def test_should_call_an_allowed_function_with_the_kwargs() -> None:
    params = {"function": "textwrap:shorten", "kwargs": {"text": "one two three four", "width": 12}}
    assert run(PythonNode, params) == "one [...]"
    assert run(PythonNode, {"function": "json:dumps", "kwargs": {"obj": {"b": 1, "a": 2}, "sort_keys": True}}) == (
        '{"a": 2, "b": 1}'
    )


@pytest.mark.usefixtures("allow_stdlib")
def test_should_allow_submodules_of_an_allowed_module_and_not_lookalikes() -> None:
    assert run(PythonNode, {"function": "json.encoder:py_encode_basestring", "kwargs": {"s": "ab"}}) == '"ab"'
    for refused in ("os:getcwd", "jsonschema:validate", "textwrapper:x"):
        with pytest.raises(NodeError, match="is not allowed by FIREFLOW_PYTHON_NODE_MODULES"):
            run(PythonNode, {"function": refused})


def test_should_refuse_everything_when_the_allow_list_is_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIREFLOW_PYTHON_NODE_MODULES", " , ")
    with pytest.raises(NodeError, match="allows nothing") as caught:
        run(PythonNode, {"function": "json:dumps"})
    assert caught.value.retryable is False


def test_should_check_the_allow_list_again_at_run_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIREFLOW_PYTHON_NODE_MODULES", "json")
    params = PythonParams.model_validate({"function": "json:dumps", "kwargs": {"obj": 1}})
    monkeypatch.setenv("FIREFLOW_PYTHON_NODE_MODULES", "")
    with pytest.raises(NodeError, match="is not allowed"):
        run_node(PythonNode, params, ctx())


@pytest.mark.usefixtures("allow_stdlib")
@pytest.mark.parametrize(
    "function",
    ["json:_default_encoder", "json:__name__", "json:JSONDecoder.decode", "json", ":dumps", "json:dumps()"],
)
def test_should_refuse_private_names_and_attribute_chains(function: str) -> None:
    with pytest.raises(NodeError, match=re.escape("must be 'package.module:function'")):
        run(PythonNode, {"function": function})


@pytest.mark.usefixtures("allow_stdlib")
@pytest.mark.parametrize(
    ("params", "message", "retryable"),
    [
        ({"function": "json:nope"}, "json:nope cannot be imported: module 'json' has no attribute 'nope'", False),
        ({"function": "textwrap:nope"}, "textwrap:nope cannot be imported", False),
        ({"function": "json.missing_mod:f"}, "json.missing_mod:f cannot be imported: No module named", False),
        ({"function": "datetime:MINYEAR"}, "datetime:MINYEAR is an object of type int, not a function", False),
        ({"function": "json:loads", "kwargs": {"s": "{"}}, "json:loads raised JSONDecodeError: Expecting", True),
        ({"function": "json:dumps", "kwargs": {"nope": 1}}, "json:dumps raised TypeError:", True),
    ],
)
def test_should_raise_a_node_error_when_the_call_fails(params: dict[str, Any], message: str, retryable: bool) -> None:
    with pytest.raises(NodeError) as caught:
        run(PythonNode, params)
    assert message in caught.value.message
    assert caught.value.retryable is retryable


CALLABLES = "tests.unit.pycallables"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("getoutput", "is defined in module 'subprocess', which FIREFLOW_PYTHON_NODE_MODULES does not allow"),
        ("run_shell", "is an object of type builtin_function_or_method, not a function"),
        ("shout", "is an object of type method_descriptor, not a function"),
        ("Job", "is a class, not a function defined in an allowed module"),
        ("callable_object", "is an object of type _Callable, not a function"),
        ("partial_greet", "is an object of type partial, not a function"),
        ("coroutine", "is a coroutine or generator function"),
        ("generator", "is a coroutine or generator function"),
        ("async_generator", "is a coroutine or generator function"),
    ],
)
def test_should_call_only_functions_defined_in_an_allowed_module(
    monkeypatch: pytest.MonkeyPatch, name: str, message: str
) -> None:
    monkeypatch.setenv("FIREFLOW_PYTHON_NODE_MODULES", CALLABLES)
    with pytest.raises(NodeError) as caught:
        run(PythonNode, {"function": f"{CALLABLES}:{name}"})
    assert message in caught.value.message
    assert caught.value.retryable is False


def test_should_call_a_function_of_an_allowed_module_defined_in_an_allowed_submodule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FIREFLOW_PYTHON_NODE_MODULES", f"{CALLABLES},json")
    assert run(PythonNode, {"function": f"{CALLABLES}:greet", "kwargs": {"who": "Ada"}}) == "hello Ada"
    assert run(PythonNode, {"function": f"{CALLABLES}:lambda_greet"}) == "lambda"
    # `json.dumps` is defined in `json`; `os.path.basename` in `posixpath`, which "os.path" does not allow.
    assert run(PythonNode, {"function": "json:dumps", "kwargs": {"obj": 1}}) == "1"
    monkeypatch.setenv("FIREFLOW_PYTHON_NODE_MODULES", "os.path")
    with pytest.raises(NodeError, match=re.escape("os.path:basename is defined in module 'posixpath'")):
        run(PythonNode, {"function": "os.path:basename", "kwargs": {"p": "/a/b"}})


@pytest.mark.parametrize(
    ("name", "raised"), [("raises_system_exit", "SystemExit: 4"), ("raises_keyboard_interrupt", "KeyboardInterrupt")]
)
def test_should_fail_the_node_when_the_function_raises_a_base_exception(
    monkeypatch: pytest.MonkeyPatch, name: str, raised: str
) -> None:
    monkeypatch.setenv("FIREFLOW_PYTHON_NODE_MODULES", CALLABLES)
    with pytest.raises(NodeError) as caught:
        run(PythonNode, {"function": f"{CALLABLES}:{name}"})
    assert caught.value.message.startswith(f"{CALLABLES}:{name} raised {raised}")


def test_should_refuse_an_output_that_is_not_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIREFLOW_PYTHON_NODE_MODULES", CALLABLES)
    with pytest.raises(NodeError, match="is not JSON"):
        run(PythonNode, {"function": f"{CALLABLES}:returns_a_set"})


def test_should_check_and_resolve_a_function_once_per_allow_list_not_at_every_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    imports: list[str] = []
    real_import = importlib.import_module

    def counted_import(name: str, package: str | None = None) -> Any:
        imports.append(name)
        return real_import(name, package)

    monkeypatch.setattr(importlib, "import_module", counted_import)
    python_node.resolve_function.cache_clear()
    monkeypatch.setenv("FIREFLOW_PYTHON_NODE_MODULES", CALLABLES)
    for who in ("Ada", "Grace", "Linus"):
        assert run(PythonNode, {"function": f"{CALLABLES}:greet", "kwargs": {"who": who}}) == f"hello {who}"
    assert imports == [CALLABLES]
    # Another allow-list is checked afresh, and what it refuses is refused at every attempt.
    monkeypatch.setenv("FIREFLOW_PYTHON_NODE_MODULES", "json")
    for _ in range(2):
        with pytest.raises(NodeError, match="is not allowed by FIREFLOW_PYTHON_NODE_MODULES, which allows json"):
            run(PythonNode, {"function": f"{CALLABLES}:greet", "kwargs": {"who": "Ada"}})
    # A function that could not be imported is tried again (not remembered as missing).
    monkeypatch.setenv("FIREFLOW_PYTHON_NODE_MODULES", f"{CALLABLES},json")
    for _ in range(2):
        with pytest.raises(NodeError, match="cannot be imported"):
            run(PythonNode, {"function": "json:nope"})
    assert imports == [CALLABLES, "json", "json"]
