"""The run request of the run contract (pure): its JSON Schema agrees with the contract's names, what breaks it
is said in one line per problem, and the contract's names are written in fireflow_contract alone."""

from __future__ import annotations

import ast
import random
from pathlib import Path
from typing import Any

import pytest

from fireflow_contract import events, queues, run_request
from fireflow_contract.run_request import build_request, request_problems

REPO_ROOT = Path(__file__).resolve().parents[2]
GREET = {"name": "greet", "nodes": {"hello": {"type": "template", "params": {"template": "hi"}}}}
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_should_list_in_the_schema_the_contract_s_queues_event_details_and_fields() -> None:
    properties = run_request.request_schema()["properties"]
    assert tuple(properties["queue"]["enum"]) == queues.ALL_QUEUES == run_request.QUEUES
    assert tuple(properties["events"]["enum"]) == run_request.EVENT_DETAILS
    fields = {
        run_request.FLOW,
        run_request.FLOW_REF,
        run_request.INPUTS,
        run_request.QUEUE,
        run_request.EVENTS,
        run_request.TRACEPARENT,
        run_request.TRACESTATE,
    }
    assert set(properties) == fields
    assert run_request.REQUEST_SCHEMA_PATH.name == f"run-request.v{run_request.CONTRACT_VERSION}.schema.json"


def test_should_accept_a_request_of_every_queue_and_detail() -> None:
    for queue in queues.ALL_QUEUES:
        for detail in run_request.EVENT_DETAILS:
            assert request_problems({"flow_ref": "greet", "inputs": {}, "queue": queue, "events": detail}) == []


def test_should_name_unknown_fields_and_the_fields_a_request_has() -> None:
    problems = request_problems({"flow_ref": "greet", "inputs": {}, "priority": 3, "callback": "x"})
    assert problems == [
        "unknown field(s) callback, priority "
        "(a run request has: flow, flow_ref, inputs, queue, events, traceparent, tracestate)"
    ]


def test_should_say_which_events_values_there_are_when_one_is_bad() -> None:
    assert request_problems({"flow_ref": "greet", "events": "everything"}) == [
        "events: 'everything' is not one of ['steps', 'live']"
    ]
    assert request_problems({"flow_ref": "greet", "queue": "fireflow-nowhere"}) == [
        "queue: 'fireflow-nowhere' is not one of "
        "['fireflow-executions', 'fireflow-executions-background', 'fireflow-sandbox', 'fireflow-terminal']"
    ]


@pytest.mark.parametrize(
    "traceparent",
    [
        TRACEPARENT.upper(),  # W3C: lower-case hex only
        TRACEPARENT[:-1],
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
        " " + TRACEPARENT,
        TRACEPARENT + "-extra",
    ],
)
def test_should_refuse_a_traceparent_that_is_not_w3c_trace_context(traceparent: str) -> None:
    (problem,) = request_problems({"flow_ref": "greet", "traceparent": traceparent})
    assert problem.startswith(f"traceparent: {traceparent!r} does not match ")


def test_should_accept_a_w3c_traceparent_and_its_tracestate() -> None:
    assert request_problems({"flow_ref": "greet", "traceparent": TRACEPARENT, "tracestate": "vendor=1"}) == []


@pytest.mark.parametrize(
    ("request_", "problem"),
    [
        ({"inputs": {}}, "it must carry exactly one of flow and flow_ref"),
        ({"flow": GREET, "flow_ref": "greet"}, "it must carry exactly one of flow and flow_ref"),
        (["flow_ref", "greet"], "it must carry exactly one of flow and flow_ref"),
        ({"flow_ref": ""}, "flow_ref: '' should be non-empty"),
        ({"flow_ref": "greet", "inputs": ["who"]}, "inputs: ['who'] is not of type 'object'"),
    ],
)
def test_should_say_what_breaks_the_request(request_: Any, problem: str) -> None:
    assert request_problems(request_) == [problem]


def test_should_build_a_request_or_raise_value_error_naming_every_problem() -> None:
    request = build_request(flow_ref="greet", inputs={"who": "Ada"}, queue=queues.SANDBOX, events="live")
    assert request == {"inputs": {"who": "Ada"}, "queue": "fireflow-sandbox", "events": "live", "flow_ref": "greet"}
    traced = build_request(flow=GREET, inputs={}, queue=queues.EXECUTIONS, trace_context={"traceparent": TRACEPARENT})
    assert traced["traceparent"] == TRACEPARENT
    with pytest.raises(ValueError, match=r"^invalid run request: it must carry exactly one of flow and flow_ref$"):
        build_request(flow=GREET, flow_ref="greet", inputs={}, queue=queues.EXECUTIONS)
    with pytest.raises(ValueError, match=r"^invalid run request: it must carry exactly one of flow and flow_ref$"):
        build_request(inputs={}, queue=queues.EXECUTIONS)
    with pytest.raises(ValueError) as bad:
        build_request(flow_ref="greet", inputs={}, queue="elsewhere", events="all")
    assert str(bad.value) == (
        "invalid run request: events: 'all' is not one of ['steps', 'live']; queue: 'elsewhere' is not one of "
        "['fireflow-executions', 'fireflow-executions-background', 'fireflow-sandbox', 'fireflow-terminal']"
    )
    with pytest.raises(ValueError, match=r"^invalid run request: traceparent: 'nope' does not match "):
        build_request(flow_ref="greet", inputs={}, queue=queues.EXECUTIONS, trace_context={"traceparent": "nope"})


def test_should_choose_the_event_detail_by_request_then_by_queue() -> None:
    for queue in queues.ALL_QUEUES:
        default = "live" if queue in run_request.LIVE_BY_DEFAULT_QUEUES else "steps"
        assert run_request.event_detail({"flow_ref": "f", "queue": queue}) == default
        assert run_request.event_detail({"flow_ref": "f", "queue": queue, "events": "live"}) == "live"
    assert run_request.LIVE_BY_DEFAULT_QUEUES == (queues.SANDBOX,)


# The names a caller in another language must write exactly as the contract does.
CONTRACT_NAMES = {run_request.WORKFLOW_NAME, run_request.TERMINAL_CHANNEL, *events.EVENT_NAMES}


def _literals(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module that are not docstrings, with their lines."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_should_write_the_contract_s_names_in_fireflow_contract_alone() -> None:
    sources = [
        *(REPO_ROOT / "worker" / "fireflow_worker").rglob("*.py"),
        *(REPO_ROOT / "operator").rglob("*.py"),
        *(REPO_ROOT / "benchmarks").glob("*.py"),
    ]
    found = [
        f"{path.relative_to(REPO_ROOT)}:{line}: {text!r}"
        for path in sources
        for line, text in _literals(path)
        if text in CONTRACT_NAMES
    ]
    assert found == [], "use fireflow_contract's names instead"


_VALUES: dict[str, list[Any]] = {
    "flow": [GREET, {}, None, [], "greet", 1],
    "flow_ref": ["greet", "", "x" * 256, "x" * 257, None, 3, {"name": "greet"}],
    "inputs": [{}, {"who": "Ada"}, None, [], "who=Ada"],
    "queue": [*queues.ALL_QUEUES, "fireflow-other", None, 1, {}, ["fireflow-sandbox"]],
    "events": ["steps", "live", "all", None, True, {"detail": "live"}],
    "traceparent": [TRACEPARENT, TRACEPARENT.upper(), TRACEPARENT + "\n", "00-1-2-3", None, 1],
    "tracestate": ["a=b", "x" * 512, "x" * 513, None, ["a=b"]],
    "owner": ["someone"],
}


def test_should_take_the_schema_s_verdict_on_every_request_it_checks_by_hand() -> None:
    # The worker checks each run's request by hand first (jsonschema costs a tenth of a millisecond a run):
    # what it accepts that way, the schema accepts too, and every request the client builds is accepted that way.
    rng = random.Random(20261206)
    validator = run_request._validator()
    by_hand = 0
    for _ in range(5000):
        request = {field: rng.choice(values) for field, values in _VALUES.items() if rng.random() < 0.5}
        if run_request._plainly_valid(request):
            by_hand += 1
            assert validator.is_valid(request), request
    assert by_hand > 50
    for queue in queues.ALL_QUEUES:
        for detail in run_request.EVENT_DETAILS:
            built = build_request(flow=GREET, inputs={"who": "Ada"}, queue=queue, events=detail)
            assert run_request._plainly_valid(built), built
            built = build_request(flow_ref="greet", inputs={}, queue=queue, trace_context={"traceparent": TRACEPARENT})
            assert run_request._plainly_valid(built), built
