"""The rule an ended run is run again by (pure), as the `fireflow` client and `kubectl fireflow` share it."""

from __future__ import annotations

import pytest

from fireflow_contract import queues, resume, run_request


@pytest.mark.parametrize(("status", "in_place"), [("CANCELLED", True), ("MAX_RECOVERY_ATTEMPTS_EXCEEDED", True),
                                                  ("ERROR", False)])  # fmt: skip
def test_should_resume_a_cancelled_or_abandoned_run_in_place_and_fork_a_failed_one(status: str, in_place: bool) -> None:
    assert resume.resumes_in_place("r1", status) is in_place


def test_should_refuse_a_run_that_succeeded_or_has_not_ended() -> None:
    with pytest.raises(resume.NotResumableError) as done:
        resume.resumes_in_place("r1", "SUCCESS")
    assert (str(done.value), done.value.ended) == ("run r1 succeeded; there is nothing to resume", True)
    with pytest.raises(resume.NotResumableError) as running:
        resume.resumes_in_place("r1", "PENDING")
    assert (str(running.value), running.value.ended) == ("run r1 is PENDING; only an ended run can be resumed", False)


def test_should_fork_a_failed_run_from_its_first_failed_node() -> None:
    steps: list[dict[str, object]] = [{"function_id": 1, "error": None}, {"function_id": 4, "error": "late"},
             {"function_id": 3, "error": "boom"}]  # fmt: skip
    assert resume.fork_step("r1", steps) == 3
    with pytest.raises(resume.NotResumableError) as outside:
        resume.fork_step("r1", steps[:1], "bad request")
    assert str(outside.value) == "run r1 failed outside any node (bad request); it would fail again: enqueue a new run"


def test_should_resume_a_run_on_the_queue_its_request_named() -> None:
    request = run_request.build_request(flow_ref="f", inputs={}, queue=queues.SANDBOX)
    assert run_request.queue_of(run_request.request_in({"args": [request], "kwargs": {}})) == queues.SANDBOX
    assert run_request.queue_of(run_request.request_in({"args": [{"queue": "elsewhere"}]})) == queues.EXECUTIONS
    assert run_request.queue_of(run_request.request_in(None)) == queues.EXECUTIONS
