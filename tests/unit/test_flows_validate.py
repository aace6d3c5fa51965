"""Flow validation: every problem is found, reported at once, one line each naming the node and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fireflow_worker.flows.model import Flow
from fireflow_worker.flows.registry import builtin_registry
from fireflow_worker.flows.validate import FlowValidationError, load_flow, load_flow_file, validate_flow

REGISTRY = builtin_registry()


def problems(source: str | bytes | dict[str, Any]) -> list[str]:
    with pytest.raises(FlowValidationError) as caught:
        load_flow(source, REGISTRY)
    # str() is exactly one line per problem.
    assert str(caught.value).split("\n") == caught.value.problems
    return caught.value.problems


def only_problem(source: str | bytes | dict[str, Any]) -> str:
    (problem,) = problems(source)
    return problem


def flow_with(nodes: Any, **extra: Any) -> dict[str, Any]:
    return {"name": "f", "nodes": nodes, **extra}


def template(text: str = "x", **extra: Any) -> dict[str, Any]:
    return {"type": "template", "params": {"template": text}, **extra}


GREET = """
name: greet
description: says hello
inputs:
  who: {type: string}
nodes:
  hello:
    type: template
    params: {template: "Hello ${inputs.who}"}
    retry: {max_attempts: 3, interval_seconds: 1.0, backoff_rate: 2.0}
"""


# --- documents that are fine -------------------------------------------------------------------------


def test_should_load_yaml_and_json_into_the_same_flow() -> None:
    from_yaml = load_flow(GREET, REGISTRY)
    from_json = load_flow(json.dumps(from_yaml.model_dump(mode="json")), REGISTRY)
    from_dict = load_flow(from_yaml.model_dump(mode="json"), REGISTRY)
    assert from_yaml == from_json == from_dict
    assert from_yaml.nodes["hello"].retry is not None
    assert from_yaml.nodes["hello"].retry.max_attempts == 3
    assert from_yaml.inputs["who"].required is True


def test_should_load_bytes_and_yaml_flow_style_that_starts_like_json() -> None:
    assert load_flow(GREET.encode(), REGISTRY).name == "greet"
    assert load_flow("{name: f, nodes: {a: {type: template, params: {template: x}}}}", REGISTRY).name == "f"


def test_should_keep_dates_as_strings_because_a_flow_is_json() -> None:
    flow = load_flow("name: f\nnodes:\n  a: {type: template, params: {template: 2024-01-31}}", REGISTRY)
    assert flow.nodes["a"].params == {"template": "2024-01-31"}


def test_should_keep_node_order_as_declared() -> None:
    flow = load_flow(flow_with({"z": template(), "a": template(), "m": template()}), REGISTRY)
    assert list(flow.nodes) == ["z", "a", "m"]


def test_should_accept_a_reference_wherever_a_value_goes_and_check_the_literal_rest() -> None:
    flow = load_flow(
        flow_with(
            {
                "nap": {"type": "sleep", "params": {"seconds": "${inputs.n}"}},
                "call": {
                    "type": "http",
                    "params": {
                        "url": "${inputs.base}/items",
                        "expected_status": "${inputs.codes}",
                        "headers": {"X-Who": "${nodes.nap.slept_seconds}"},
                    },
                },
                "shape": {
                    "type": "transform",
                    "params": {"value": 1, "ops": ["${inputs.op}", {"pick": "${inputs.op}"}]},
                },
            },
            inputs={"n": {"type": "number"}, "base": {}, "codes": {"type": "array"}, "op": {}},
        ),
        REGISTRY,
    )
    assert set(flow.nodes) == {"nap", "call", "shape"}


def test_should_round_trip_through_model_dump() -> None:
    source = {
        "name": "f",
        "inputs": {"a": {"type": "integer", "default": 2}, "b": {"type": "string"}, "c": {"required": False}},
        "nodes": {"n": template("${inputs.a} ${inputs.b} ${inputs.c}")},
    }
    flow = load_flow(source, REGISTRY)
    again = load_flow(flow.model_dump(mode="json"), REGISTRY)
    assert again == flow
    assert [spec.required for spec in again.inputs.values()] == [False, True, False]


def test_should_check_a_flow_built_in_code() -> None:
    flow = Flow.model_validate(flow_with({"a": template("${nodes.ghost}")}))
    with pytest.raises(FlowValidationError, match="names unknown node 'ghost'"):
        validate_flow(flow, REGISTRY)
    validate_flow(Flow.model_validate(flow_with({"a": template()})), REGISTRY)


# --- documents that cannot be read ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: [", "YAML/JSON syntax error at line 1 column 8: expected the node content"),
        ("name: f\n  nodes: x\n bad", "YAML/JSON syntax error at line 2"),
        ('{"name": "f",, }', "YAML/JSON syntax error at line 1"),
        ("name: f\nname: g\nnodes: {}", "YAML/JSON syntax error at line 2 column 1: duplicate key 'name'"),
        ('{"name": "f", "name": "g"}', "JSON: duplicate key 'name'"),
        ("", "a flow is a mapping with at least name and nodes, got null"),
        ("- a\n- b", "a flow is a mapping with at least name and nodes, got a list"),
        ("just text", "a flow is a mapping with at least name and nodes, got a string"),
    ],
)
def test_should_report_one_line_when_the_document_cannot_be_read(text: str, expected: str) -> None:
    assert only_problem(text).startswith(expected)


def test_should_report_bytes_that_are_not_utf8() -> None:
    assert only_problem(b"name: \xff").startswith("the flow document is not UTF-8")


def test_should_report_values_that_are_not_json() -> None:
    found = problems("name: f\nnodes:\n  a: {type: template, params: {template: .nan, 1: x}}")
    assert found == [
        "nodes.a.params.template: nan is not a JSON number",
        "nodes.a.params: key 1 is not a string (quote it)",
    ]
    assert only_problem({"name": "f", "nodes": {"a": {"type": "template", "params": {"t": {1, 2}}}}}) == (
        "nodes.a.params.t: a set is not JSON data"
    )


def test_should_prefix_problems_with_the_file_when_loading_a_file(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(GREET)
    assert load_flow_file(good, REGISTRY).name == "greet"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: f\nnodes: {a: {type: nope}}")
    with pytest.raises(FlowValidationError) as caught:
        load_flow_file(bad, REGISTRY)
    assert caught.value.problems[0].startswith(f"{bad}: node 'a': type: unknown node type 'nope'")
    with pytest.raises(FlowValidationError, match="cannot read the flow"):
        load_flow_file(tmp_path / "missing.yaml", REGISTRY)


# --- the flow's own fields ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({"nodes": {"a": template()}}, "name: is required"),
        (flow_with({"a": template()}, name="Bad Name"), "name: String should match pattern"),
        (flow_with({"a": template()}, name="x" * 129), "name: String should match pattern"),
        (flow_with({"a": template()}, version=2), "version: is not a known field (known: name, description,"),
        ({"name": "f"}, "nodes: is required"),
        (flow_with({}), "nodes: a flow needs at least one node"),
        (flow_with([]), "nodes: Input should be a valid dictionary"),
        (flow_with({"a": template()}, outputs="a"), "outputs: Input should be a valid list (got 'a')"),
        (flow_with({"a": template()}, outputs=["a", "b"]), "outputs: unknown node 'b'"),
        (flow_with({"a": template()}, outputs=["a", "a"]), "outputs: node 'a' is listed twice"),
    ],
)
def test_should_report_bad_flow_fields(source: dict[str, Any], expected: str) -> None:
    assert only_problem(source).startswith(expected)


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        ({"who": {"type": "text"}}, "input 'who': type: Input should be 'string', 'number', "),
        ({"who": {"kind": "string"}}, "input 'who': kind: is not a known field (known: type, description, default,"),
        ({"n": {"type": "integer", "default": "5"}}, "input 'n': default '5' is not of type integer"),
        ({"n": {"type": "number", "example": True}}, "input 'n': example True is not of type number"),
        ({"n": {"default": 1, "required": True}}, "input 'n': a required input cannot have a default"),
        ({"bad name": {}}, "input 'bad name': the name must match"),
        ({"who": "string"}, "input 'who': Input should be a valid dictionary or instance of InputSpec"),
    ],
)
def test_should_report_bad_input_declarations(inputs: dict[str, Any], expected: str) -> None:
    assert only_problem(flow_with({"a": template()}, inputs=inputs)).startswith(expected)


# --- nodes ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node_id", "node", "expected"),
    [
        ("a", {"params": {}}, "node 'a': type: is required"),
        ("a", template(parms={}), "node 'a': parms: is not a known field (known: type, description,"),
        ("a", "template", "node 'a': Input should be a valid dictionary or instance of NodeSpec"),
        ("a", template(after="b"), "node 'a': after: Input should be a valid list"),
        ("a", template(retry={"max_attempts": 21}), "node 'a': retry.max_attempts: Input should be less than or"),
        ("a", template(retry={"max_attempts": 0}), "node 'a': retry.max_attempts: Input should be greater than"),
        ("a", template(retry={"interval_seconds": -1}), "node 'a': retry.interval_seconds: Input should be greater"),
        ("a", template(retry={"backoff_rate": 0.5}), "node 'a': retry.backoff_rate: Input should be greater than"),
        ("a", template(retry={"tries": 2}), "node 'a': retry.tries: is not a known field (known: max_attempts,"),
        ("1a", template(), "node '1a': the id must match ^[A-Za-z_][A-Za-z0-9_-]{0,63}$"),
        ("a" * 65, template(), f"node '{'a' * 65}': the id must match"),
        ("a.b", template(), "node 'a.b': the id must match"),
    ],
)
def test_should_report_bad_node_fields_and_ids(node_id: str, node: Any, expected: str) -> None:
    assert only_problem(flow_with({node_id: node})).startswith(expected)


def test_should_list_the_known_types_when_a_node_type_is_unknown() -> None:
    assert only_problem(flow_with({"a": {"type": "templat"}})) == (
        "node 'a': type: unknown node type 'templat' (known: fail, http, python, sleep, template, transform)"
    )


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        ({"type": "template"}, "node 'a': params.template: is required"),
        (template(extra=1), "node 'a': extra: is not a known field"),
        ({"type": "template", "params": {"template": "x", "tmpl": 1}}, "node 'a': params.tmpl: is not a known field"),
        ({"type": "sleep", "params": {"seconds": -1}}, "node 'a': params.seconds: Input should be greater than or"),
        ({"type": "sleep", "params": {"seconds": "soon"}}, "node 'a': params.seconds: Input should be a valid number"),
        ({"type": "fail", "params": {"fail_attempts": -1}}, "node 'a': params.fail_attempts: Input should be greater"),
        ({"type": "http", "params": {"url": "ftp://h/x"}}, "node 'a': params.url: must be an absolute http:// or"),
        ({"type": "http", "params": {"url": "/relative"}}, "node 'a': params.url: must be an absolute http:// or"),
        ({"type": "http", "params": {"url": "http://h", "method": "FETCH"}}, "node 'a': params.method: Input should"),
        ({"type": "http", "params": {"url": "http://h", "json": {}, "body": "x"}}, "node 'a': params: give either"),
        ({"type": "http", "params": {"url": "http://h", "expected_status": [700]}}, "node 'a': params.expected_status"),
        ({"type": "transform", "params": {"ops": ["frob"]}}, "node 'a': params.ops[0]: unknown operation 'frob'"),
        ({"type": "transform", "params": {"ops": [{"pick": [], "omit": []}]}}, "node 'a': params.ops[0]: an operation"),
        ({"type": "transform", "params": {"ops": [{"pick": "a"}]}}, "node 'a': params.ops[0].pick: Input should be"),
        ({"type": "transform", "params": {"ops": [{"pick": None}]}}, "node 'a': params.ops[0]: operation 'pick' needs"),
        (
            {"type": "transform", "params": {"ops": [{"map": [{"join": 1}]}]}},
            "node 'a': params.ops[0].map[0].join: Input should be a valid string",
        ),
        (
            {"type": "transform", "params": {"ops": [{"map": [{"pick": ["a"], "x": 1}]}]}},
            "node 'a': params.ops[0].map[0]: an operation is one name",
        ),
    ],
)
def test_should_check_params_against_the_node_type(node: dict[str, Any], expected: str) -> None:
    assert only_problem(flow_with({"a": node})).startswith(expected)


def test_should_report_params_that_are_not_a_mapping_once() -> None:
    assert only_problem(flow_with({"a": {"type": "sleep", "params": [1]}})) == (
        "node 'a': params: Input should be a valid dictionary"
    )


def test_should_check_params_even_when_another_field_of_the_node_is_invalid() -> None:
    found = problems(flow_with({"a": {"type": "sleep", "params": {"seconds": -1}, "retry": {"max_attempts": 99}}}))
    assert [line.split(":")[1].strip() for line in found] == ["retry.max_attempts", "params.seconds"]


# --- references, after, cycles --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        (template("${nodes.ghost}"), "node 'a': params.template: ${nodes.ghost} names unknown node 'ghost'"),
        (template("${nodes.bb.x}"), "node 'a': params.template: ${nodes.bb.x} names unknown node 'bb' (did you mean"),
        (template("${inputs.whom}"), "node 'a': params.template: ${inputs.whom} names undeclared input 'whom' ("),
        (template("${inputs.who.first}"), "node 'a': params.template: ${inputs.who.first} reads a field of input"),
        (template("${who}"), "node 'a': params.template: malformed reference '${who}'"),
        (template("${inputs.who"), "node 'a': params.template: '${' at position 0 has no closing '}'"),
        (template(after=["ghost"]), "node 'a': after: unknown node 'ghost'"),
        (
            {"type": "transform", "params": {"value": {"k": ["${nodes.nope}"]}}},
            "node 'a': params.value.k[0]: ${nodes.nope} names unknown node",
        ),
    ],
)
def test_should_report_dangling_and_malformed_references(node: dict[str, Any], expected: str) -> None:
    source = flow_with({"a": node, "b": template()}, inputs={"who": {"type": "string"}})
    assert only_problem(source).startswith(expected)


def test_should_list_the_declared_inputs_when_an_input_is_unknown() -> None:
    source = flow_with({"a": template("${inputs.c}")}, inputs={"a": {}, "b": {}})
    assert only_problem(source).endswith("names undeclared input 'c' (declared: a, b)")
    assert only_problem(flow_with({"a": template("${inputs.c}")})).endswith("(declared: none)")


def test_should_allow_paths_into_object_array_and_any_inputs() -> None:
    inputs = {"o": {"type": "object"}, "l": {"type": "array"}, "x": {}}
    load_flow(flow_with({"a": template("${inputs.o.k} ${inputs.l.0} ${inputs.x.y}")}, inputs=inputs), REGISTRY)


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        ({"a": template("${nodes.a}")}, "dependency cycle: a -> a (each waits for the next)"),
        ({"a": template("${nodes.b}"), "b": template("${nodes.a.x}")}, "dependency cycle: a -> b -> a"),
        ({"a": template(after=["c"]), "b": template(after=["a"]), "c": template("${nodes.b}")}, "dependency cycle: a"),
    ],
)
def test_should_name_the_cycle_path(nodes: dict[str, Any], expected: str) -> None:
    assert only_problem(flow_with(nodes)).startswith(expected)
    if len(nodes) == 3:
        assert only_problem(flow_with(nodes)) == "dependency cycle: a -> c -> b -> a (each waits for the next)"


def test_should_report_every_problem_at_once() -> None:
    text = """
name: Not Valid
inputs:
  who: {type: strin}
nodes:
  fetch:
    type: http
    params: {url: "ftp://example.com", timeout_seconds: 0}
    retry: {max_attempts: 50}
  greet:
    type: templat
    params: {template: "Hi ${inputs.whom} ${nodes.fech}"}
  loop:
    type: template
    params: {template: "${nodes.loop}"}
    after: [nowhere]
  bad id: {type: fail}
outputs: [greet, missing]
"""
    assert problems(text) == [
        "name: String should match pattern '^[a-z0-9._-]{1,128}$' (got 'Not Valid')",
        "input 'who': type: Input should be 'string', 'number', 'integer', 'boolean', 'object', 'array' or 'any'"
        " (got 'strin')",
        "node 'fetch': retry.max_attempts: Input should be less than or equal to 20 (got 50)",
        "node 'fetch': params.url: must be an absolute http:// or https:// URL, got 'ftp://example.com'",
        "node 'fetch': params.timeout_seconds: Input should be greater than 0 (got 0)",
        "node 'greet': type: unknown node type 'templat' (known: fail, http, python, sleep, template, transform)",
        "node 'greet': params.template: ${inputs.whom} names undeclared input 'whom' (declared: who)",
        "node 'greet': params.template: ${nodes.fech} names unknown node 'fech' (did you mean 'fetch'?)",
        "node 'loop': after: unknown node 'nowhere'",
        "node 'bad id': the id must match ^[A-Za-z_][A-Za-z0-9_-]{0,63}$",
        "dependency cycle: loop -> loop (each waits for the next)",
        "outputs: unknown node 'missing'",
    ]


# --- the python node's allow-list, checked when the flow is validated -----------------------------------


def python_flow(function: str) -> dict[str, Any]:
    return flow_with({"a": {"type": "python", "params": {"function": function, "kwargs": {"x": 1}}}})


def test_should_refuse_a_python_function_when_the_allow_list_is_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIREFLOW_PYTHON_NODE_MODULES", "")
    assert only_problem(python_flow("json:dumps")) == (
        "node 'a': params.function: module 'json' is not allowed by FIREFLOW_PYTHON_NODE_MODULES, "
        "which allows nothing (it is empty)"
    )


def test_should_leave_the_allow_list_to_the_workers_when_it_is_unset_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client enqueuing a flow does not know the workers' allow-list; they enforce it at run time."""
    monkeypatch.delenv("FIREFLOW_PYTHON_NODE_MODULES", raising=False)
    load_flow(python_flow("json:dumps"), REGISTRY)
    assert "must be 'package.module:function'" in only_problem(python_flow("json.dumps"))


def test_should_accept_a_python_function_from_an_allowed_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIREFLOW_PYTHON_NODE_MODULES", "json, textwrap")
    load_flow(python_flow("json:dumps"), REGISTRY)
    assert only_problem(python_flow("os:system")).endswith("which allows json, textwrap")
    assert "must be 'package.module:function'" in only_problem(python_flow("json.dumps"))
    # A reference is checked at run time, when its value is known.
    load_flow(python_flow("${inputs.fn}") | {"inputs": {"fn": {"type": "string"}}}, REGISTRY)
