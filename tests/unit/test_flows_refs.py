"""References in params: parsing, escapes, typed and interpolated substitution, run-time lookup errors."""

from __future__ import annotations

from typing import Any

import pytest

from fireflow_worker.flows.graph import compile_params, resolve_params
from fireflow_worker.flows.nodetype import NodeError
from fireflow_worker.flows.refs import Reference, ReferenceSyntaxError, has_reference, lookup_path, parse, scan

INPUTS: dict[str, Any] = {"who": "Ada", "n": 3, "flag": True, "tags": ["a", "b"], "nothing": None}
OUTPUTS: dict[str, Any] = {"fetch": {"status": 200, "body": {"items": [{"id": 7}, {"id": 8}]}}, "hello": "hi"}


def resolve(value: Any) -> Any:
    return resolve_params({"value": value}, INPUTS, OUTPUTS)["value"]


def test_should_parse_literal_text_and_references_when_mixed() -> None:
    assert parse("plain") == ["plain"]
    assert parse("Hi ${inputs.who}, see ${nodes.fetch.body.items.0}!") == [
        "Hi ",
        Reference("inputs", "who"),
        ", see ",
        Reference("nodes", "fetch", ("body", "items", "0")),
        "!",
    ]


def test_should_print_a_reference_as_written() -> None:
    assert str(Reference("nodes", "fetch", ("body", "0"))) == "${nodes.fetch.body.0}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$${inputs.who}", ["${inputs.who}"]),
        ("cost: $5 and $${x}", ["cost: $5 and ${x}"]),
        ("$$${inputs.who}", ["$${inputs.who}"]),
        ("a $${b} ${inputs.who}", ["a ${b} ", Reference("inputs", "who")]),
    ],
)
def test_should_read_double_dollar_brace_as_a_literal_when_escaped(text: str, expected: list[Any]) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("${}", "malformed reference '${}'"),
        ("${foo}", "malformed reference '${foo}'"),
        ("${inputs}", "malformed reference"),
        ("${inputs.who.}", "malformed reference"),
        ("${ inputs.who }", "malformed reference"),
        ("${nodes.1abc}", "malformed reference"),
        ("${inputs.who", "has no closing '}'"),
        ("${inputs.${x}}", "has no closing '}'"),
    ],
)
def test_should_raise_a_syntax_error_when_a_reference_is_malformed(text: str, fragment: str) -> None:
    with pytest.raises(ReferenceSyntaxError) as caught:
        parse(text)
    assert fragment in str(caught.value)


def test_should_report_every_reference_and_error_with_its_location_when_scanning() -> None:
    found = list(scan({"a": ["${inputs.x} ${bad}", {"b": "${nodes.n.k}"}], "c": 5}, ("params",)))
    assert [(loc, str(item)) for loc, item in found if isinstance(item, Reference)] == [
        (("params", "a", 0), "${inputs.x}"),
        (("params", "a", 1, "b"), "${nodes.n.k}"),
    ]
    errors = [loc for loc, item in found if isinstance(item, ReferenceSyntaxError)]
    assert errors == [("params", "a", 0)]


def test_should_never_scan_mapping_keys() -> None:
    assert list(scan({"${inputs.x}": 1})) == []


def test_should_tell_whether_a_string_depends_on_run_time_values() -> None:
    assert has_reference("x ${inputs.a}")
    assert has_reference("${broken")
    assert not has_reference("$${inputs.a}")
    assert not has_reference("plain")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("${inputs.n}", 3),
        ("${inputs.flag}", True),
        ("${inputs.tags}", ["a", "b"]),
        ("${inputs.nothing}", None),
        ("${nodes.fetch.body}", {"items": [{"id": 7}, {"id": 8}]}),
        ("${nodes.fetch.body.items.1.id}", 8),
        ("${inputs.tags.0}", "a"),
    ],
)
def test_should_keep_the_value_type_when_a_string_is_exactly_one_reference(value: str, expected: Any) -> None:
    assert resolve(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Hi ${inputs.who}", "Hi Ada"),
        ("n=${inputs.n}", "n=3"),
        ("${inputs.flag}!", "true!"),
        ("${inputs.nothing} ", "null "),
        ("${inputs.tags} ", '["a", "b"] '),
        ("${inputs.who}${inputs.n}", "Ada3"),
        ("body: ${nodes.fetch.body.items.0}", 'body: {"id": 7}'),
        ("$${inputs.who} is ${inputs.who}", "${inputs.who} is Ada"),
    ],
)
def test_should_interpolate_as_text_when_a_reference_is_inside_a_longer_string(value: str, expected: str) -> None:
    assert resolve(value) == expected


def test_should_substitute_at_any_depth_and_leave_other_values_alone() -> None:
    params = {
        "a": [1, "${inputs.n}", {"b": "${nodes.hello} there", "c": None}],
        "d": 2.5,
        "${inputs.who}": "key is literal",
    }
    assert resolve_params(params, INPUTS, OUTPUTS) == {
        "a": [1, 3, {"b": "hi there", "c": None}],
        "d": 2.5,
        "${inputs.who}": "key is literal",
    }


def test_should_not_modify_the_params_it_resolves() -> None:
    params = {"a": ["${inputs.n}"]}
    resolve_params(params, INPUTS, OUTPUTS)
    assert params == {"a": ["${inputs.n}"]}


def test_should_build_a_fresh_copy_each_time_from_params_compiled_once() -> None:
    compiled = compile_params({"list": [1, {"deep": "x"}], "who": "${inputs.who}", "bad": "${broken"})
    good = compile_params({"list": [1, {"deep": "x"}], "who": "Hi ${inputs.who}", "body": "${nodes.fetch.body}"})
    first = resolve_params(good, INPUTS, OUTPUTS)
    first["list"][1]["deep"] = "changed"
    first["body"]["items"].clear()
    assert resolve_params(good, INPUTS, OUTPUTS) == {
        "list": [1, {"deep": "x"}],
        "who": "Hi Ada",
        "body": {"items": [{"id": 7}, {"id": 8}]},
    }
    for _ in range(2):  # a malformed reference fails every run that resolves it, with its own message
        with pytest.raises(NodeError, match="has no closing"):
            resolve_params(compiled, INPUTS, OUTPUTS)


def test_should_give_copies_so_a_node_cannot_change_another_node_output() -> None:
    resolved = resolve_params({"body": "${nodes.fetch.body}"}, INPUTS, OUTPUTS)
    resolved["body"]["items"].clear()
    assert OUTPUTS["fetch"]["body"]["items"] == [{"id": 7}, {"id": 8}]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("${inputs.missing}", "${inputs.missing}: there is no input 'missing'"),
        ("${nodes.later}", "${nodes.later}: there is no output of node 'later'"),
        ("${nodes.fetch.headers}", "in the output of node 'fetch', the value has no field 'headers'"),
        ("${nodes.fetch.body.items.5}", "body.items is a list of 2 items; '5' is not an index"),
        ("${nodes.fetch.body.items.x}", "'x' is not an index"),
        ("${nodes.fetch.status.code}", "status is a number, it has no field 'code'"),
        ("${nodes.hello.x}", "the value is a string, it has no field 'x'"),
        ("${broken", "has no closing"),
    ],
)
def test_should_raise_a_non_retryable_node_error_when_a_reference_cannot_be_resolved(value: str, message: str) -> None:
    with pytest.raises(NodeError) as caught:
        resolve(value)
    assert message in caught.value.message
    assert caught.value.retryable is False


def test_should_follow_paths_through_objects_and_lists() -> None:
    assert lookup_path({"a": [{"b": 1}]}, ("a", "0", "b")) == 1
    assert lookup_path(5, ()) == 5
    with pytest.raises(LookupError, match=r"a\.0 has no field 'c'"):
        lookup_path({"a": [{"b": 1}]}, ("a", "0", "c"))
