"""A node can fail, never the worker: whatever a node's code raises or does, the run ends with a message
and the worker keeps serving; a run that kills its worker on every attempt ends instead of poisoning the
pool; a worker whose own machinery breaks says so and exits."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fireflow_worker.client import FireflowClient
from tests.support import flows
from tests.support.proc import WorkerProcess, wait_for

StartWorker = Callable[..., WorkerProcess]


def _python_flow(name: str, function: str, **kwargs: Any) -> dict[str, Any]:
    return {
        "name": name,
        "nodes": {
            "call": {
                "type": "python",
                "params": {"function": f"tests.support.sideeffects:{function}", "kwargs": kwargs},
            }
        },
    }


def _status(url: str, run_id: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT status FROM dbos.workflow_status WHERE workflow_uuid = %s", (run_id,)).fetchone()
    assert row is not None
    return str(row[0])


@pytest.mark.parametrize("kind", ["SystemExit", "KeyboardInterrupt", "GeneratorExit", "BaseException"])
def test_should_fail_the_node_and_keep_serving_when_a_function_raises_a_base_exception(
    client: FireflowClient, start_worker: StartWorker, kind: str
) -> None:
    worker = start_worker()
    doomed = client.enqueue(_python_flow("raises", "raise_base", kind=kind))
    with pytest.raises(Exception, match=f"node 'call' failed: .*raised {kind}"):
        client.result(doomed, timeout_seconds=120)
    assert client.status(doomed).status == "ERROR"
    events = [e["event"] for e in client.events(doomed)]
    assert events == ["run.started", "node.started", "node.failed", "run.failed"]
    # The worker still claims and finishes runs, and says it is ready.
    after = client.enqueue(flows.greet_flow(), inputs={"who": "next"})
    assert client.result(after, timeout_seconds=120) == {"hello": "Hello next"}
    assert worker.get("/readyz")[0] == 200


def test_should_end_a_run_that_kills_its_worker_on_every_attempt(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str, tmp_path: Path
) -> None:
    attempts = tmp_path / "attempts.txt"
    worker = start_worker(FIREFLOW_MAX_RECOVERY_ATTEMPTS="1")
    poison = client.enqueue(_python_flow("poison", "exit_process", path=str(attempts)))
    # Dispatch 1 and the one recovery allowed each end the process; the next start dead-letters the run.
    assert worker.wait_exit(timeout=60) == 9
    worker = start_worker(wait=False, FIREFLOW_MAX_RECOVERY_ATTEMPTS="1")  # recovers the run and dies with it
    assert worker.wait_exit(timeout=60) == 9
    worker = start_worker(FIREFLOW_MAX_RECOVERY_ATTEMPTS="1")
    wait_for(lambda: _status(migrated_url, poison) == "MAX_RECOVERY_ATTEMPTS_EXCEEDED", what="the dead letter")
    assert attempts.read_text().splitlines() == ["attempt", "attempt"]
    status = client.status(poison)
    assert status.status == "MAX_RECOVERY_ATTEMPTS_EXCEEDED"
    assert status.error is not None and "2 times" in status.error
    # The pool is not poisoned: the same worker serves the next run.
    assert client.result(client.enqueue(flows.greet_flow(), inputs={"who": "after"}), timeout_seconds=120) == {
        "hello": "Hello after"
    }
    assert worker.get("/readyz")[0] == 200


@pytest.mark.parametrize(
    ("sabotage", "problem"),
    [("break_event_loop", "DBOS's event loop is no longer running"), ("shut_down_thread_pool", "thread pool")],
)
def test_should_report_not_ready_and_exit_70_when_the_machinery_breaks(
    client: FireflowClient, start_worker: StartWorker, sabotage: str, problem: str
) -> None:
    worker = start_worker()
    client.enqueue(_python_flow("breaker", sabotage))

    def not_ready() -> bool:
        try:
            status, body = worker.get("/readyz")
        except OSError:
            return False
        return status == 503 and body.startswith("broken: ") and problem in body

    wait_for(not_ready, what="/readyz to say the worker is broken")
    assert worker.wait_exit(timeout=60) == 70
    output = worker.output()
    assert "the worker's machinery is broken" in output
    assert problem in output


def _dispatches(url: str, run_id: str) -> tuple[str, int]:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT status, recovery_attempts FROM dbos.workflow_status WHERE workflow_uuid = %s", (run_id,)
        ).fetchone()
    assert row is not None
    return str(row[0]), int(row[1])


def test_should_not_count_graceful_drains_towards_abandoning_a_run(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str
) -> None:
    settings = {"FIREFLOW_MAX_RECOVERY_ATTEMPTS": "1", "DBOS_SHUTDOWN_DRAIN_TIMEOUT_MS": "1000"}
    worker = start_worker(**settings)
    # The sleep is durable (its wake-up time is recorded): it must outlast three slow restarts on a busy machine.
    run_id = client.enqueue(flows.sleep_flow(45))
    wait_for(lambda: _dispatches(migrated_url, run_id) == ("PENDING", 1), what="the first dispatch")
    for _ in range(3):  # three rolling updates while the run sleeps: more than the one recovery allowed
        worker.terminate()
        assert worker.wait_exit(timeout=60) == 0
        assert _dispatches(migrated_url, run_id) == ("PENDING", 0)  # the drained dispatch was given back
        worker = start_worker(**settings)
        wait_for(lambda: _dispatches(migrated_url, run_id) == ("PENDING", 1), what="the run's recovery")
    assert client.result(run_id, timeout_seconds=120) == {"nap": {"slept_seconds": 45}}
