"""Documents built to hurt the validator (alias bombs, deep nesting, huge numbers, huge flows): each is
refused quickly with one readable line per problem, never a traceback."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest

from fireflow_worker.flows.limits import MAX_NESTING_DEPTH, json_bytes, nesting_problem
from fireflow_worker.flows.registry import builtin_registry
from fireflow_worker.flows.validate import FlowValidationError, load_flow, validate_run_inputs

REGISTRY = builtin_registry()

# Nine lists of nine aliases of the level below: 9**9 strings once expanded, from under a kilobyte of text.
ALIAS_BOMB = "\n".join(
    ["name: bomb", 'a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    + ["nodes: {t: {type: template, params: {template: x}}}"]
)


def problems(source: str | dict[str, Any]) -> list[str]:
    with pytest.raises(FlowValidationError) as caught:
        load_flow(source, REGISTRY)
    assert all("\n" not in problem for problem in caught.value.problems)
    return caught.value.problems


def test_should_refuse_yaml_aliases_before_expanding_them() -> None:
    assert len(ALIAS_BOMB) < 1024
    assert problems(ALIAS_BOMB) == [
        "YAML/JSON syntax error at line 3 column 10: aliases (*a0) are not allowed in a flow; write the value out"
    ]


def test_should_refuse_a_merge_key_too_since_it_is_an_alias() -> None:
    text = "name: m\nbase: &b {type: template}\nnodes:\n  t:\n    <<: *b\n    params: {template: x}\n"
    (problem,) = problems(text)
    assert "aliases (*b) are not allowed" in problem


def test_should_accept_an_anchor_that_nothing_refers_to() -> None:
    load_flow("name: a\nnodes:\n  t: &t {type: template, params: {template: x}}\n", REGISTRY)


@pytest.mark.parametrize(
    "text",
    [
        "name: deep\nnodes: {t: {type: template, params: {template: x, extra: " + "[" * 5000 + "]" * 5000 + "}}}",
        '{"name": "deep", "nodes": {"t": {"type": "template", "params": {"template": "x", "v": '
        + "[" * 5000
        + "]" * 5000
        + "}}}}",
        '{"name": "deep", "nodes": ' + '{"a":' * 200 + "1" + "}" * 200 + "}",
    ],
    ids=["yaml-5000", "json-5000", "json-200"],
)
def test_should_refuse_deep_nesting_with_one_line(text: str) -> None:
    (problem,) = problems(text)
    assert f"nested more than {MAX_NESTING_DEPTH} levels deep" in problem


def test_should_refuse_deep_nesting_in_data_given_directly() -> None:
    value: Any = 1
    for _ in range(5000):
        value = [value]
    (problem,) = problems({"name": "deep", "nodes": {"t": {"type": "template", "params": {"template": value}}}})
    assert problem == f"the document is nested more than {MAX_NESTING_DEPTH} levels deep"


@pytest.mark.parametrize("text", ["name: n\nx: " + "9" * 5000, '{"name": "n", "x": ' + "9" * 5000 + "}"])
def test_should_refuse_a_number_python_will_not_convert(text: str) -> None:
    (problem,) = problems(text)
    assert "Exceeds the limit (4300 digits)" in problem


def test_should_refuse_more_nodes_than_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = {f"n{i}": {"type": "template", "params": {"template": "x"}} for i in range(1001)}
    assert problems({"name": "big", "nodes": nodes}) == [
        "nodes: 1001 nodes, more than the limit of 1000 (FIREFLOW_MAX_FLOW_NODES)"
    ]
    monkeypatch.setenv("FIREFLOW_MAX_FLOW_NODES", "2000")
    load_flow({"name": "big", "nodes": nodes}, REGISTRY)
    monkeypatch.setenv("FIREFLOW_MAX_FLOW_NODES", "lots")
    assert problems({"name": "big", "nodes": nodes}) == [
        "invalid FIREFLOW_MAX_FLOW_NODES='lots'; accepted: an integer from 1 to 100000"
    ]


def test_should_validate_a_10000_node_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIREFLOW_MAX_FLOW_NODES", "10000")
    nodes = {"n0": {"type": "template", "params": {"template": "x"}}} | {
        f"n{i}": {"type": "template", "params": {"template": f"${{nodes.n{i - 1}}}"}} for i in range(1, 10_000)
    }
    flow = load_flow({"name": "chain", "nodes": nodes}, REGISTRY)
    assert len(flow.nodes) == 10_000


def test_should_list_the_first_problems_and_count_the_rest() -> None:
    nodes = {f"n{i}": {"type": "nope"} for i in range(300)}
    with pytest.raises(FlowValidationError) as caught:
        load_flow({"name": "broken", "nodes": nodes}, REGISTRY)
    lines = str(caught.value).split("\n")
    assert len(caught.value.problems) == 300
    assert len(lines) == 101
    assert lines[-1] == "... and 200 more problems"


def test_should_report_many_cycles_as_a_few_and_a_count() -> None:
    nodes = {"hub": {"type": "template", "params": {"template": "x"}, "after": [f"s{i}" for i in range(50)]}} | {
        f"s{i}": {"type": "template", "params": {"template": "${nodes.hub}"}} for i in range(50)
    }
    found = problems({"name": "cycles", "nodes": nodes})
    assert len(found) == 11
    assert found[-1] == "... and 40 more dependency cycles"


def test_should_survive_pickling_as_a_step_error_does() -> None:
    """DBOS stores a failed step's exception and raises a copy; the copy must keep its problems."""
    err = FlowValidationError(["node 'a': first", "node 'b': second"])
    copy = pickle.loads(pickle.dumps(err))
    assert copy.problems == err.problems
    assert str(copy) == "node 'a': first\nnode 'b': second"
    assert copy.one_line() == "node 'a': first; node 'b': second"


def test_should_refuse_a_deeply_nested_run_input() -> None:
    flow = load_flow(
        {"name": "f", "inputs": {"x": {}}, "nodes": {"t": {"type": "template", "params": {"template": "a"}}}}
    )
    value: Any = 0
    for _ in range(3000):
        value = {"k": value}
    with pytest.raises(FlowValidationError) as caught:
        validate_run_inputs(flow, {"x": value})
    assert caught.value.problems == [f"input 'x' is nested more than {MAX_NESTING_DEPTH} levels deep"]


def test_should_measure_data_as_compact_utf8_json() -> None:
    assert json_bytes({"a": [1, "é"]}) == len(
        json.dumps({"a": [1, "é"]}, ensure_ascii=False, separators=(",", ":")).encode()
    )
    assert nesting_problem([[1]], limit=2) is None
    assert nesting_problem([[[1]]], limit=2) == "the value is nested more than 2 levels deep"
