"""A pure node's attempts in the workflow (node_step.PureAttempts): the waits, retries and errors DBOS's retry
loop gives a node's step, with no DBOS step at all."""

from __future__ import annotations

from typing import Any

import pytest
from dbos import StepOptions
from dbos import error as dbos_error

from fireflow_worker.flows.nodetype import NodeError
from fireflow_worker.node_step import NodeCall, PureAttempts
from fireflow_worker.run_limits import OutputBudget, RunLimits


def _call(node_type: str, params: dict[str, Any], *, cancelled: bool = False, limit: int = 1 << 20) -> NodeCall:
    return NodeCall("run", "n", node_type, params, RunLimits(), OutputBudget(limit), lambda _run, _now: cancelled)


def _options(max_attempts: int) -> StepOptions:
    return {
        "name": "node:n",
        "retries_allowed": max_attempts > 1,
        "max_attempts": max_attempts,
        "interval_seconds": 0.5,
        "backoff_rate": 3.0,
    }


def test_should_return_the_record_a_step_would_have_recorded() -> None:
    attempts = PureAttempts(_call("template", {"template": "hi"}), _options(1))
    assert attempts.next() == {"output": "hi", "bytes": 4}


def test_should_wait_as_dbos_does_between_attempts_and_say_which_attempt_succeeded() -> None:
    attempts = PureAttempts(_call("fail", {"fail_attempts": 2}), _options(3))
    assert attempts.next() == 0.5
    assert attempts.next() == 1.5
    assert attempts.next() == {"output": {"succeeded_on_attempt": 3}, "bytes": 26, "attempt": 3}


def test_should_end_with_every_attempt_s_error_once_the_retries_are_spent() -> None:
    attempts = PureAttempts(_call("fail", {"message": "no"}), _options(2))
    assert attempts.next() == 0.5
    with pytest.raises(dbos_error.DBOSMaxStepRetriesExceeded) as raised:
        attempts.next()
    assert [str(err) for err in raised.value.errors] == ["no (attempt 1)", "no (attempt 2)"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (_call("template", {"template": "x", "extra": 1}), "bad params for node type 'template'"),
        (_call("template", {"template": "x" * 100}, limit=10), "the run's stored outputs would reach"),
        (_call("fail", {"message": "no"}, cancelled=True), "no (attempt 1)"),
    ],
)
def test_should_not_retry_what_another_attempt_cannot_fix_nor_a_cancelled_run(call: NodeCall, message: str) -> None:
    with pytest.raises(NodeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        PureAttempts(call, _options(5)).next()
