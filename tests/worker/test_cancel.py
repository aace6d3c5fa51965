"""Cancel and resume, with real workers: a cancelled run ends at once (even asleep), its running node is not
retried, its slot is free, it is counted as cancelled; cancelled and failed runs resume from where they
stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fireflow_worker.client import FireflowClient, RunCancelledError, RunNotFoundError, RunStateError
from tests.support import flows
from tests.support.proc import WorkerProcess, wait_for

StartWorker = Callable[..., WorkerProcess]
FIREFLOW_BIN = str(Path(sys.executable).with_name("fireflow"))
CALL = "tests.support.sideeffects:"


def _python(
    function: str, after: list[str] | None = None, retry: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "python", "params": {"function": CALL + function, "kwargs": kwargs}}
    if after:
        node["after"] = after
    if retry:
        node["retry"] = retry
    return node


def _started(client: FireflowClient, run_id: str, node: str) -> bool:
    """Whether `node` has started (its event is in the stream); reads without waiting for more."""
    from dbos import error as dbos_error  # noqa: PLC0415

    seen = []
    try:
        for event in client.events(run_id, timeout_seconds=0.2):
            seen.append(event)
    except dbos_error.DBOSException:
        pass
    return any(e.get("event") == "node.started" and e.get("node") == node for e in seen)


def _fireflow(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL_EXECUTIONS": url}
    return subprocess.run([FIREFLOW_BIN, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def test_should_end_a_sleeping_run_at_once_and_free_its_slot(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str
) -> None:
    worker = start_worker(DBOS_WORKER_CONCURRENCY="1")
    asleep = client.enqueue(flows.sleep_flow(3600, name="long-nap"))
    wait_for(lambda: _started(client, asleep, "nap"), what="the sleep to start")
    result = _fireflow(migrated_url, "cancel", asleep)
    assert (result.returncode, result.stdout.strip()) == (0, f"cancelled run {asleep}")
    assert client.status(asleep).status == "CANCELLED"
    # The only slot is free again: the next run finishes long before the hour the sleep had left.
    after = client.enqueue(flows.greet_flow(), inputs={"who": "next"})
    assert client.result(after, timeout_seconds=30) == {"hello": "Hello next"}
    with pytest.raises(RunCancelledError, match=f"run {asleep} was cancelled"):
        client.result(asleep, timeout_seconds=5)
    # Following a cancelled run ends, after the events it had.
    assert [e["event"] for e in client.events(asleep)] == ["run.started", "node.started"]
    queue = '{queue="fireflow-executions"}'
    wait_for(lambda: worker.metric("fireflow_runs_cancelled_total", queue) == 1, what="the cancelled counter")
    assert worker.metric("fireflow_runs_failed_total", queue) == 0
    assert worker.metric("fireflow_active_runs", "") == 0
    # Cancelling again is a no-op; a finished or unknown run cannot be cancelled.
    assert _fireflow(migrated_url, "cancel", asleep).returncode == 0
    refused = _fireflow(migrated_url, "cancel", after)
    assert (refused.returncode, refused.stderr.strip()) == (
        1,
        f"error: run {after} already ended with SUCCESS; there is nothing to cancel",
    )
    unknown = _fireflow(migrated_url, "cancel", "no-such-run")
    assert (unknown.returncode, unknown.stderr.strip()) == (1, "error: there is no run 'no-such-run'")


@pytest.mark.parametrize(
    ("attempt_seconds", "interval_seconds"),
    [(3.0, 0.1), (0.1, 3.0)],
    ids=["cancelled-during-the-attempt", "cancelled-while-waiting-to-retry"],
)
def test_should_not_retry_the_node_running_when_the_run_is_cancelled(
    client: FireflowClient, start_worker: StartWorker, tmp_path: Path, attempt_seconds: float, interval_seconds: float
) -> None:
    trace = tmp_path / "trace.txt"
    start_worker(DBOS_WORKER_CONCURRENCY="1")
    retry = {"max_attempts": 5, "interval_seconds": interval_seconds, "backoff_rate": 1.0}
    flow = {
        "name": "stubborn",
        "nodes": {
            "try": _python("record_then_fail", retry=retry, path=str(trace), label="try", seconds=attempt_seconds)
        },
    }
    run_id = client.enqueue(flow)
    wait_for(trace.exists, what="the first attempt")
    time.sleep(0.5)
    client.cancel(run_id)
    # The slot is free at once, while the attempt (or the retry's wait) is still going.
    assert client.result(client.enqueue(flows.greet_flow(), inputs={"who": "x"}), timeout_seconds=30)
    time.sleep(attempt_seconds + interval_seconds + 2)  # past the attempt and the wait: no attempt may follow
    assert trace.read_text().splitlines() == ["try"]
    assert client.status(run_id).status == "CANCELLED"


def test_should_resume_a_cancelled_run_at_its_first_unfinished_node(
    client: FireflowClient, start_worker: StartWorker, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.txt"
    start_worker()
    flow = {
        "name": "three-steps",
        "nodes": {
            "first": _python("record", path=str(trace), label="first"),
            "slow": _python("record_then_sleep", ["first"], path=str(trace), label="slow", seconds=2),
            "last": _python("record", ["slow"], path=str(trace), label="last"),
        },
    }
    run_id = client.enqueue(flow)
    wait_for(lambda: "slow" in (trace.read_text() if trace.exists() else ""), what="the slow node")
    client.cancel(run_id)
    with pytest.raises(RunCancelledError):
        client.result(run_id, timeout_seconds=10)
    assert client.resume(run_id) == run_id
    assert client.result(run_id, timeout_seconds=60) == {"last": {"recorded": "last"}}
    # `first` finished before the cancel and never runs again; `slow` was cut short and runs again.
    lines = trace.read_text().splitlines()
    assert lines.count("first") == 1
    assert lines.count("slow") == 2
    assert lines[-1] == "last"


def test_should_resume_a_failed_run_as_a_new_run_from_the_failed_node(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str, tmp_path: Path
) -> None:
    trace, marker = tmp_path / "trace.txt", tmp_path / "ready"
    start_worker()
    flow = {
        "name": "flaky-middle",
        "nodes": {
            "first": _python("record", path=str(trace), label="first"),
            "flaky": _python("fail_unless_exists", ["first"], path=str(marker), trace=str(trace)),
            "last": _python("record", ["flaky"], path=str(trace), label="last"),
        },
    }
    failed = client.enqueue(flow)
    with pytest.raises(Exception, match=r"node 'flaky' failed: .*:fail_unless_exists raised RuntimeError: .* yet"):
        client.result(failed, timeout_seconds=60)
    marker.touch()
    resumed = _fireflow(migrated_url, "resume", failed, "--follow")
    assert resumed.returncode == 0, resumed.stderr
    lines = resumed.stdout.splitlines()
    new_id = lines[0].removeprefix(f"resumed run {failed} as new run ")
    assert new_id != failed
    assert json.loads(lines[-1]) == {"run_id": new_id, "result": {"last": {"recorded": "last"}}}
    assert trace.read_text().splitlines() == ["first", "flaky", "flaky", "last"]
    assert client.status(failed).status == "ERROR"  # the failed run stays as it was


def test_should_refuse_to_resume_a_run_that_succeeded_or_does_not_exist(
    client: FireflowClient, start_worker: StartWorker
) -> None:
    start_worker()
    done = client.enqueue(flows.greet_flow(), inputs={"who": "x"})
    client.result(done, timeout_seconds=60)
    with pytest.raises(RunStateError, match="succeeded; there is nothing to resume"):
        client.resume(done)
    with pytest.raises(RunNotFoundError):
        client.resume("no-such-run")
