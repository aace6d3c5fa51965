"""A run's inputs at enqueue: declared names only, required ones present, types checked, defaults applied."""

from __future__ import annotations

from typing import Any

import pytest

from fireflow_worker.flows.registry import builtin_registry
from fireflow_worker.flows.validate import FlowValidationError, load_flow, validate_run_inputs

FLOW = load_flow(
    {
        "name": "typed",
        "inputs": {
            "s": {"type": "string"},
            "n": {"type": "number", "required": False},
            "i": {"type": "integer", "default": 1},
            "b": {"type": "boolean", "default": False},
            "o": {"type": "object", "default": {"k": [1]}},
            "a": {"type": "array", "required": False},
            "x": {},
        },
        "nodes": {"t": {"type": "template", "params": {"template": "${inputs.s}"}}},
    },
    builtin_registry(),
)


def run_input_problems(inputs: dict[str, Any] | None) -> list[str]:
    with pytest.raises(FlowValidationError) as caught:
        validate_run_inputs(FLOW, inputs)
    return caught.value.problems


def test_should_apply_defaults_and_keep_declaration_order() -> None:
    result = validate_run_inputs(FLOW, {"x": [1], "s": "hi"})
    assert list(result) == ["s", "n", "i", "b", "o", "a", "x"]
    assert result == {"s": "hi", "n": None, "i": 1, "b": False, "o": {"k": [1]}, "a": None, "x": [1]}


def test_should_copy_defaults_so_a_run_cannot_change_the_flow() -> None:
    result = validate_run_inputs(FLOW, {"s": "", "x": 0})
    result["o"]["k"].append(2)
    assert FLOW.inputs["o"].default == {"k": [1]}


def test_should_accept_supplied_values_of_the_declared_types() -> None:
    supplied = {"s": "a", "n": 2.5, "i": 3.0, "b": True, "o": {}, "a": [], "x": {"any": "thing"}}
    result = validate_run_inputs(FLOW, supplied)
    assert result == supplied
    assert type(result["i"]) is int


def test_should_accept_null_only_for_optional_or_any_inputs() -> None:
    assert validate_run_inputs(FLOW, {"s": "a", "n": None, "x": None})["n"] is None
    assert run_input_problems({"s": None, "x": 1}) == ["input 's': None is not of type string"]


def test_should_report_missing_required_inputs() -> None:
    assert run_input_problems({}) == ["input 's' is required (type string)", "input 'x' is required (type any)"]
    assert run_input_problems(None) == run_input_problems({})


def test_should_report_undeclared_inputs_naming_the_declared_ones() -> None:
    assert run_input_problems({"s": "a", "x": 1, "extra": 1}) == [
        "input 'extra' is not declared by flow 'typed' (declared: s, n, i, b, o, a, x)"
    ]


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("s", 5, "input 's': 5 is not of type string"),
        ("n", "5", "input 'n': '5' is not of type number"),
        ("n", True, "input 'n': True is not of type number"),
        ("n", float("inf"), "input 'n': inf is not of type number"),
        ("i", 2.5, "input 'i': 2.5 is not of type integer"),
        ("i", False, "input 'i': False is not of type integer"),
        ("b", 1, "input 'b': 1 is not of type boolean"),
        ("o", [], "input 'o': [] is not of type object"),
        ("a", {}, "input 'a': {} is not of type array"),
        ("x", {"when": b"raw"}, "input x.when: a bytes is not JSON data"),
    ],
)
def test_should_report_values_of_the_wrong_type(name: str, value: Any, expected: str) -> None:
    assert run_input_problems({"s": "ok", "x": 1, name: value}) == [expected]


def test_should_report_every_input_problem_at_once() -> None:
    assert len(run_input_problems({"s": 1, "i": "x", "zzz": 0})) == 4
