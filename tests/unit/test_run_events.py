"""Events derived from a run's records (run_events.Deriver): what a follower sees for each state a run can be
in, each event once, in order, and the event detail a request chooses."""

from __future__ import annotations

from typing import Any

import pytest
from dbos import error as dbos_error

from fireflow_contract.run_request import LIVE_DETAIL as LIVE
from fireflow_contract.run_request import STEPS_DETAIL as STEPS
from fireflow_contract.run_request import event_detail
from fireflow_worker.flows.nodetype import NodeError
from fireflow_worker.node_step import node_finished_event
from fireflow_worker.run_events import Deriver, Step, error_line, flow_label

FLOW = {
    "name": "three",
    "nodes": {
        "a": {"type": "template", "params": {"template": "x"}},
        "nap": {"type": "sleep", "params": {"seconds": 5}, "after": ["a"]},
        "b": {"type": "fail", "after": ["nap"]},
    },
}


def _step(function_id: int, name: str, output: Any = None, error: BaseException | None = None, at: int = 0) -> Step:
    return Step(function_id, name, output, error, at, at + 10)


def test_should_choose_the_detail_from_the_request_else_from_the_queue() -> None:
    assert event_detail({"events": "live", "queue": "fireflow-executions"}) == LIVE
    assert event_detail({"events": "steps", "queue": "fireflow-sandbox"}) == STEPS
    assert event_detail({"queue": "fireflow-sandbox"}) == LIVE
    assert event_detail({"queue": "fireflow-executions"}) == STEPS
    assert event_detail({"events": "everything"}) == STEPS  # unknown: the default, never an error on the worker
    assert event_detail("not a request") == STEPS


def test_should_name_the_flow_by_its_name_or_its_reference_on_one_short_line() -> None:
    assert flow_label({"flow": {"name": "greet"}}) == "greet"
    assert flow_label({"flow_ref": "stored"}) == "stored"
    assert flow_label({"flow_ref": "a\nb" + "c" * 500}) == ("a b" + "c" * 196 + "…")
    assert flow_label({"inputs": {}}) is None
    assert flow_label(["no"]) is None


def test_should_tell_nothing_while_the_run_waits_in_its_queue() -> None:
    deriver = Deriver({"flow": FLOW})
    assert deriver.update("ENQUEUED", None, None, None, [], now_ms=1000) == []
    assert not deriver.ended


def test_should_derive_every_event_once_as_the_records_appear() -> None:
    deriver = Deriver({"flow": FLOW})
    first = deriver.update("PENDING", 100, None, None, [], now_ms=150)
    assert first == [{"event": "run.started", "flow": "three", "at_ms": 100}]
    a = _step(1, "node:a", {"output": "x", "bytes": 3}, at=110)
    second = deriver.update("PENDING", 100, None, None, [a], now_ms=200)
    assert second == [
        {"event": "node.started", "node": "a", "type": "template", "attempt": 1, "at_ms": 110},
        {"event": "node.finished", "node": "a", "attempt": 1, "duration_ms": 10, "at_ms": 120},
    ]
    # The same records again: nothing new. A durable node shows its start, and ends once its time has come.
    nap = _step(2, "node:nap", {"output": {}, "bytes": 2, "wake_at_ms": 5130, "started_at_ms": 125}, at=125)
    assert deriver.update("PENDING", 100, None, None, [a], now_ms=300) == []
    asleep = deriver.update("PENDING", 100, None, None, [a, nap], now_ms=400)
    assert [e["event"] for e in asleep] == ["node.started"]
    assert deriver.update("PENDING", 100, None, None, [a, nap], now_ms=5000) == []
    woke = deriver.update("PENDING", 100, None, None, [a, nap], now_ms=5200)
    assert woke == [{"event": "node.finished", "node": "nap", "attempt": 1, "duration_ms": 5005, "at_ms": 5130}]
    failed = DbosRetries([NodeError("one"), NodeError("two\nlines")])
    b = _step(3, "node:b", error=failed, at=5140)
    last = deriver.update("ERROR", 100, 5160, "node 'b' failed after 2 attempts: two lines", [a, nap, b], 5300)
    assert last == [
        {"event": "node.started", "node": "b", "type": "fail", "attempt": 1, "at_ms": 5140},
        {"event": "node.failed", "node": "b", "attempt": 2, "error": "two lines", "duration_ms": 10, "at_ms": 5150},
        {"event": "run.failed", "error": "node 'b' failed after 2 attempts: two lines", "at_ms": 5160},
    ]
    assert deriver.ended
    assert deriver.update("ERROR", 100, 5160, "x", [a, nap, b], now_ms=9999) == []


class DbosRetries(dbos_error.DBOSMaxStepRetriesExceeded):
    def __init__(self, errors: list[Exception]) -> None:
        super().__init__("node:b", len(errors), errors)


def test_should_end_a_successful_run_with_every_sleep_finished_and_a_cancelled_one_without_them() -> None:
    nap = _step(1, "node:nap", {"output": {}, "bytes": 2, "wake_at_ms": 9000, "started_at_ms": 10}, at=10)
    done = Deriver({"flow": FLOW}).update("SUCCESS", 5, 9100, None, [nap], now_ms=9200)
    # `a` (a template: pure, never recorded) ran before `nap`, which depends on it.
    assert [(e["event"], e.get("node")) for e in done] == [
        ("run.started", None),
        ("node.started", "a"),
        ("node.finished", "a"),
        ("node.started", "nap"),
        ("node.finished", "nap"),
        ("run.finished", None),
    ]
    cancelled = Deriver({"flow": FLOW}).update("CANCELLED", 5, 500, None, [nap], now_ms=600)
    assert [(e["event"], e.get("node")) for e in cancelled] == [
        ("run.started", None),
        ("node.started", "a"),
        ("node.finished", "a"),
        ("node.started", "nap"),
    ]


def test_should_take_node_types_from_a_stored_flow_s_provision_step() -> None:
    deriver = Deriver({"flow_ref": "stored"})
    provision = _step(1, "provision", FLOW)
    node = _step(2, "node:a", {"output": "x", "bytes": 3, "attempt": 3})
    events = deriver.update("SUCCESS", 1, 50, None, [node, provision], now_ms=60)
    started = next(e for e in events if e["event"] == "node.started")
    finished = next(e for e in events if e["event"] == "node.finished")
    assert (started["type"], finished["attempt"]) == ("template", 3)
    assert events[0] == {"event": "run.started", "flow": "stored", "at_ms": 1}


def test_should_tell_a_run_that_failed_before_any_node_with_its_two_run_events() -> None:
    events = Deriver("not an object").update("ERROR", None, 70, "invalid run request: ...", [], now_ms=80)
    assert events == [
        {"event": "run.started", "flow": None, "at_ms": 80},
        {"event": "run.failed", "error": "invalid run request: ...", "at_ms": 70},
    ]


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (None, ("", 1)),
        (NodeError("bad\tthing"), ("bad thing", 1)),
        (RuntimeError(""), ("RuntimeError", 1)),
        (DbosRetries([RuntimeError("a"), NodeError("b" * 3000)]), ("b" * 1999 + "…", 2)),
    ],
)
def test_should_read_a_recorded_error_as_one_line_and_its_attempts(
    error: BaseException | None, expected: tuple[str, int]
) -> None:
    assert error_line(error) == expected


MIXED = {
    "name": "mixed",
    "nodes": {
        "greet": {"type": "template", "params": {"template": "hi"}},
        "call": {"type": "python", "params": {"function": "m:f", "kwargs": {"x": "${nodes.greet}"}}},
        "shape": {"type": "transform", "params": {"value": "${nodes.call}"}},
        "aside": {"type": "template", "params": {"template": "independent"}},
    },
}


def _names(events: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(e["event"], e.get("node")) for e in events]


def test_should_derive_a_pure_node_once_a_recorded_node_shows_it_ran_and_the_rest_when_the_run_succeeds() -> None:
    deriver = Deriver({"flow": MIXED})
    assert _names(deriver.update("PENDING", 100, None, None, [], now_ms=105)) == [("run.started", None)]
    call = _step(1, "node:call", {"output": "r", "bytes": 3}, at=110)
    during = deriver.update("PENDING", 100, None, None, [call], now_ms=130)
    # `greet` ran: `call` depends on it. `shape` and `aside` may not have run yet: nothing says so.
    assert _names(during) == [
        ("node.started", "greet"),
        ("node.finished", "greet"),
        ("node.started", "call"),
        ("node.finished", "call"),
    ]
    assert during[0] == {"event": "node.started", "node": "greet", "type": "template", "attempt": 1, "at_ms": 100}
    assert during[1] == {"event": "node.finished", "node": "greet", "attempt": 1, "duration_ms": 0, "at_ms": 100}
    end = deriver.update("SUCCESS", 100, 140, None, [call], now_ms=150)
    assert _names(end) == [
        ("node.started", "aside"),
        ("node.finished", "aside"),
        ("node.started", "shape"),
        ("node.finished", "shape"),
        ("run.finished", None),
    ]
    assert [e["at_ms"] for e in end] == [100, 100, 120, 120, 140]  # when their inputs were ready
    assert all(isinstance(e["duration_ms"], int) for e in during + end if "duration_ms" in e)


def test_should_derive_the_ready_pure_nodes_of_a_run_a_node_failed_and_none_of_one_that_failed_before_its_nodes() -> (
    None
):
    failed = _step(1, "node:call", error=NodeError("boom"), at=110)
    events = Deriver({"flow": MIXED}).update("ERROR", 100, 140, "node 'call' failed: boom", [failed], now_ms=150)
    # `aside` was ready and ran beside `call`; `shape` waited for `call`, which failed.
    assert _names(events) == [
        ("run.started", None),
        ("node.started", "aside"),
        ("node.finished", "aside"),
        ("node.started", "greet"),
        ("node.finished", "greet"),
        ("node.started", "call"),
        ("node.failed", "call"),
        ("run.failed", None),
    ]
    invalid = Deriver({"flow": MIXED}).update("ERROR", 100, 140, "invalid run inputs: ...", [], now_ms=150)
    assert _names(invalid) == [("run.started", None), ("run.failed", None)]


def test_should_place_a_pure_node_of_a_recovered_run_before_the_recorded_node_that_needed_it() -> None:
    call = _step(1, "node:call", {"output": "r", "bytes": 3}, at=110)
    # Recovered: the run's start is its last claim (500), after `call` ran in its first execution.
    events = Deriver({"flow": MIXED}).update("PENDING", 500, None, None, [call], now_ms=600)
    assert _names(events)[1:3] == [("node.started", "greet"), ("node.finished", "greet")]
    assert events[2]["at_ms"] == 110


def test_should_tell_a_pure_node_s_recorded_failure_like_any_node_s() -> None:
    retried = DbosRetries([NodeError("no"), NodeError("still no")])
    shape = _step(2, "node:shape", error=retried, at=130)
    call = _step(1, "node:call", {"output": "r", "bytes": 3}, at=110)
    events = Deriver({"flow": MIXED}).update("ERROR", 100, 150, "node 'shape' failed", [call, shape], now_ms=160)
    assert ("node.finished", "shape") not in _names(events)
    failed = next(e for e in events if e["event"] == "node.failed")
    assert (failed["node"], failed["attempt"], failed["error"]) == ("shape", 2, "still no")


def test_should_end_a_durable_node_before_a_node_that_depends_on_it_starts() -> None:
    flow = {
        "name": "nap-then-call",
        "nodes": {
            "nap": {"type": "sleep", "params": {"seconds": 1}},
            "call": {"type": "python", "params": {"function": "m:f"}, "after": ["nap"]},
        },
    }
    nap = _step(1, "node:nap", {"output": {}, "bytes": 2, "wake_at_ms": 1100, "started_at_ms": 100}, at=100)
    call = _step(2, "node:call", {"output": 1, "bytes": 1}, at=1105)
    # Read once, after both were recorded, with the reader's clock behind the worker's.
    events = Deriver({"flow": flow}).update("PENDING", 90, None, None, [nap, call], now_ms=1000)
    assert _names(events) == [
        ("run.started", None),
        ("node.started", "nap"),
        ("node.finished", "nap"),
        ("node.started", "call"),
        ("node.finished", "call"),
    ]


def test_should_write_live_durations_in_whole_milliseconds_as_the_derived_ones() -> None:
    finished = node_finished_event("n", 1, 12.6)
    assert finished["duration_ms"] == 13 and isinstance(finished["duration_ms"], int)
