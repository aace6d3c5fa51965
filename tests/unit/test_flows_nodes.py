"""The built-in node types' run(), called the way the engine calls them (parse_params, then run_node)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from fireflow_worker.flows.model import NodeSpec, RetryPolicy
from fireflow_worker.flows.nodes import FailNode, SleepNode, TemplateNode, TransformNode
from fireflow_worker.flows.nodetype import AnyNodeType, NodeContext, NodeError, parse_params, retry_policy, run_node


class Sleeps:
    """A sleeper that records what it was asked (the engine passes its durable sleep here)."""

    def __init__(self) -> None:
        self.requested: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.requested.append(seconds)


def ctx(attempt: int = 1, sleeper: Any = time.sleep) -> NodeContext:
    return NodeContext(run_id="run-1", node_id="n", sleeper=sleeper, attempt=attempt)


def run(node_type: AnyNodeType, params: dict[str, Any], context: NodeContext | None = None) -> Any:
    return run_node(node_type, parse_params(node_type, params), context or ctx())


# --- template -------------------------------------------------------------------------------------------


def test_should_return_the_rendered_template() -> None:
    assert run(TemplateNode, {"template": "Hello Ada"}) == "Hello Ada"


def test_should_render_a_whole_reference_of_another_type_as_text() -> None:
    assert run(TemplateNode, {"template": 5}) == "5"
    assert run(TemplateNode, {"template": {"a": [1]}}) == '{"a": [1]}'


# --- transform ------------------------------------------------------------------------------------------

PEOPLE = [
    {"name": "Ada", "role": "eng", "age": 36, "tags": ["x"]},
    {"name": "Bob", "role": "ops", "age": 41, "tags": ["y", "z"]},
    {"name": "Cy", "role": "eng", "age": 29, "tags": []},
]


@pytest.mark.parametrize(
    ("value", "ops", "expected"),
    [
        ({"a": 1}, [], {"a": 1}),
        ({"a": {"b": [10, 20]}}, [{"get": "a.b.1"}], 20),
        ({"a": 1}, [{"get": ""}], {"a": 1}),
        (PEOPLE[0], [{"pick": ["name", "age", "missing"]}], {"name": "Ada", "age": 36}),
        (PEOPLE[0], [{"omit": ["tags", "role"]}], {"name": "Ada", "age": 36}),
        ({"a": 1, "b": 2}, [{"rename": {"a": "x"}}], {"x": 1, "b": 2}),
        ({"a": 1, "b": 2}, [{"merge": {"b": 3, "c": {"d": 4}}}], {"a": 1, "b": 3, "c": {"d": 4}}),
        ([{"a": 1, "b": 1}, {"b": 2}, {}], ["merge_all"], {"a": 1, "b": 2}),
        (PEOPLE, [{"map": [{"get": "name"}]}], ["Ada", "Bob", "Cy"]),
        (PEOPLE, [{"where": {"role": "eng"}}, {"map": [{"get": "name"}]}], ["Ada", "Cy"]),
        (PEOPLE, [{"where": {"tags.0": "y", "role": "ops"}}, "length"], 1),
        (PEOPLE, [{"where": {"nope.deeper": 1}}], []),
        ({"a": 1, "b": 2}, ["keys"], ["a", "b"]),
        ({"a": 1, "b": 2}, ["values"], [1, 2]),
        ("héllo", ["length"], 5),
        ({"a": 1}, [{"length": True}], 1),
        (PEOPLE, [{"map": [{"get": "tags"}]}, "flatten"], ["x", "y", "z"]),
        ([[1], 2, [[3]]], ["flatten"], [1, 2, [3]]),
        (["a", 1, None, {"k": True}], [{"join": ", "}], 'a, 1, null, {"k": true}'),
        (PEOPLE, [{"map": [{"get": "age"}]}, "sum"], 106),
        ([0.5, 1], ["sum"], 1.5),
        (None, [{"default": {"empty": True}}], {"empty": True}),
        (0, [{"default": 5}], 0),
        ('{"k": [1, 2]}', ["parse_json", {"get": "k.1"}], 2),
        (
            {"users": PEOPLE},
            [{"get": "users"}, {"map": [{"pick": ["name", "role"]}, {"rename": {"name": "who"}}]}, {"get": "1"}],
            {"who": "Bob", "role": "ops"},
        ),
    ],
)
def test_should_apply_each_transform_operation_in_order(value: Any, ops: list[Any], expected: Any) -> None:
    assert run(TransformNode, {"value": value, "ops": ops}) == expected


def test_should_not_change_its_input_value() -> None:
    value = {"a": 1, "b": {"c": 2}}
    run(TransformNode, {"value": value, "ops": [{"merge": {"a": 9}}, {"rename": {"b": "x"}}, {"omit": ["a"]}]})
    assert value == {"a": 1, "b": {"c": 2}}


@pytest.mark.parametrize(
    ("value", "ops", "message"),
    [
        ([1], [{"pick": ["a"]}], "ops[0] (pick): pick needs an object, got a list"),
        ({"a": 1}, [{"get": "b"}], "ops[0] (get): the value has no field 'b'"),
        ("x", ["keys", "sum"], "ops[0] (keys): keys needs an object, got a string"),
        ([1, True], ["sum"], "ops[0] (sum): sum needs numbers, got a boolean"),
        ([{"a": 1}, 2], ["merge_all"], "ops[0] (merge_all): merge_all (each item) needs an object, got a number"),
        (5, ["length"], "ops[0] (length): length needs a list, an object or a string, got a number"),
        ({"a": 1}, [{"join": ","}], "ops[0] (join): join needs a list, got an object"),
        ("{nope", ["parse_json"], "ops[0] (parse_json): Expecting property name"),
        ([{"a": 1}, "x"], [{"map": [{"get": "a"}]}], "ops[0] (map): the value is a string, it has no field 'a'"),
        ({"a": 1}, [{"default": 2}, {"where": {}}], "ops[1] (where): where needs a list, got an object"),
    ],
)
def test_should_fail_without_retry_when_an_operation_does_not_fit_the_value(
    value: Any, ops: list[Any], message: str
) -> None:
    with pytest.raises(NodeError) as caught:
        run(TransformNode, {"value": value, "ops": ops})
    assert caught.value.message.startswith(message)
    assert caught.value.retryable is False


# --- sleep ----------------------------------------------------------------------------------------------


def test_should_sleep_through_the_context_and_report_the_seconds() -> None:
    sleeps = Sleeps()
    assert run(SleepNode, {"seconds": 2.5}, ctx(sleeper=sleeps)) == {"slept_seconds": 2.5}
    assert sleeps.requested == [2.5]
    assert SleepNode.durable is True


def test_should_really_wait_when_the_sleeper_is_time_sleep() -> None:
    started = time.monotonic()
    run(SleepNode, {"seconds": 0.05})
    assert time.monotonic() - started >= 0.05


# --- fail -----------------------------------------------------------------------------------------------


def test_should_always_fail_when_fail_attempts_is_not_set() -> None:
    for attempt in (1, 2, 10):
        with pytest.raises(NodeError, match=rf"^no luck \(attempt {attempt}\)$") as caught:
            run(FailNode, {"message": "no luck"}, ctx(attempt=attempt))
        assert caught.value.retryable is True


def test_should_fail_only_the_first_attempts_when_fail_attempts_is_set() -> None:
    params = {"fail_attempts": 2}
    for attempt in (1, 2):
        with pytest.raises(NodeError, match="failed on purpose"):
            run(FailNode, params, ctx(attempt=attempt))
    assert run(FailNode, params, ctx(attempt=3)) == {"succeeded_on_attempt": 3}
    assert run(FailNode, {"fail_attempts": 0}) == {"succeeded_on_attempt": 1}


# --- the engine-facing helpers --------------------------------------------------------------------------


def test_should_raise_a_non_retryable_node_error_when_resolved_params_are_bad() -> None:
    with pytest.raises(NodeError) as caught:
        parse_params(SleepNode, {"seconds": "a while", "extra": 1})
    assert caught.value.message == (
        "bad params for node type 'sleep': params.seconds: Input should be a valid number, unable to parse string"
        " as a number; params.extra: Extra inputs are not permitted"
    )
    assert caught.value.retryable is False


def test_should_use_the_node_retry_policy_over_the_type_default() -> None:
    own = RetryPolicy(max_attempts=5, interval_seconds=0.1, backoff_rate=1.5)
    assert retry_policy(FailNode, NodeSpec(type="fail", retry=own)) == own
    assert retry_policy(FailNode, NodeSpec(type="fail")) == RetryPolicy(max_attempts=1)
