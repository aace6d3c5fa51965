"""Crashes, drains and sharing the work: what makes a run durable, with real worker processes."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from fireflow_worker.client import FireflowClient
from tests.support import flows
from tests.support.proc import WorkerProcess, wait_for

StartWorker = Callable[..., WorkerProcess]


def _row(url: str, run_id: str) -> tuple[str, str]:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT status, executor_id FROM dbos.workflow_status WHERE workflow_uuid = %s", (run_id,)
        ).fetchone()
    assert row is not None
    return str(row[0]), str(row[1])


def _checkpointed(url: str, run_id: str, step_name: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = %s AND function_name = %s",
            (run_id, step_name),
        ).fetchone()
    return bool(row and row[0])


def test_should_finish_the_run_without_repeating_finished_nodes_when_killed_mid_flow(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.txt"
    worker = start_worker("worker-a")
    run_id = client.enqueue(flows.side_effect_flow(str(trace), sleep_seconds=2.5))
    wait_for(lambda: _checkpointed(migrated_url, run_id, "node:first"), what="the first node's checkpoint")
    worker.kill()  # SIGKILL: no drain, no cleanup; the run is left PENDING mid-sleep
    assert _row(migrated_url, run_id) == ("PENDING", "worker-a")

    start_worker("worker-a")  # same id: launch recovers what this executor left PENDING
    assert client.result(run_id) == {"last": {"recorded": "last"}}
    assert trace.read_text().splitlines() == ["first", "last"]
    events = list(client.events(run_id))
    assert [e["event"] for e in events].count("run.started") == 1  # from the workflow: recorded once
    finished = [e["node"] for e in events if e["event"] == "node.finished"]
    assert set(finished) == {"first", "nap", "last"}
    # A step checkpointed before the crash is never run again; one interrupted mid-step may repeat its events.
    assert finished.count("first") == 1
    assert events[-1]["event"] == "run.finished"


def _checkpoints(url: str, run_id: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT function_name FROM dbos.operation_outputs WHERE workflow_uuid = %s ORDER BY function_id", (run_id,)
        ).fetchall()
    return [str(row[0]) for row in rows]


@pytest.mark.parametrize("branches", [False, True], ids=["chain", "graph"])
def test_should_recompute_pure_nodes_and_never_repeat_a_finished_effect_when_killed_mid_flow(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str, tmp_path: Path, branches: bool
) -> None:
    trace = tmp_path / "trace.txt"
    worker = start_worker("worker-a")
    run_id = client.enqueue(flows.mixed_flow(str(trace), sleep_seconds=2.5, branches=branches), inputs={"who": "Ada"})
    wait_for(lambda: _checkpointed(migrated_url, run_id, "node:nap"), what="the sleep's checkpoint")
    worker.kill()  # SIGKILL mid-sleep: the pure nodes before it were never recorded
    assert _row(migrated_url, run_id) == ("PENDING", "worker-a")
    assert _checkpoints(migrated_url, run_id) == ["node:first", "node:nap"]

    start_worker("worker-a")
    expected = {"out": "first for Ada; last after first"} | ({"aside": "aside Ada"} if branches else {})
    assert client.result(run_id) == expected  # the recovery computed greet and shape again, to the same values
    assert trace.read_text().splitlines() == ["first", "last after first"]  # `first` did not run again
    assert _checkpoints(migrated_url, run_id) == ["node:first", "node:nap", "node:last"]
    events = list(client.events(run_id))
    finished = [e["node"] for e in events if e["event"] == "node.finished"]
    assert sorted(finished) == sorted(["greet", "first", "shape", "nap", "last", "out"] + (["aside"] * branches))
    position = {(e["event"], e.get("node")): index for index, e in enumerate(events)}
    for parent, child in [("greet", "first"), ("first", "shape"), ("shape", "nap"), ("nap", "last"), ("last", "out")]:
        assert position["node.finished", parent] < position["node.started", child]


def test_should_let_a_second_worker_take_queued_runs_while_the_first_is_busy(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str
) -> None:
    start_worker("worker-a", DBOS_WORKER_CONCURRENCY="1")
    # Long enough that worker-a is still busy however slowly worker-b starts on a loaded machine.
    first = client.enqueue(flows.sleep_flow(120))
    wait_for(lambda: _row(migrated_url, first)[0] == "PENDING", what="worker-a to claim the first run")
    second = client.enqueue(flows.sleep_flow(0.1))
    time.sleep(0.5)  # worker-a polls meanwhile but, at concurrency 1, must leave the second run queued
    assert _row(migrated_url, second)[0] == "ENQUEUED"
    start_worker("worker-b", DBOS_WORKER_CONCURRENCY="1")
    client.result(second)
    assert _row(migrated_url, first) == ("PENDING", "worker-a")
    assert _row(migrated_url, second)[1] == "worker-b"
    client.cancel(first)


def test_should_finish_short_runs_and_leave_long_ones_pending_when_sigterm_drains(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str
) -> None:
    worker = start_worker("worker-a", DBOS_SHUTDOWN_DRAIN_TIMEOUT_MS="3000")
    short = client.enqueue(flows.sleep_flow(1, name="short"))
    long = client.enqueue(flows.sleep_flow(8, name="long"))
    wait_for(
        lambda: _row(migrated_url, short)[0] == "PENDING" and _row(migrated_url, long)[0] == "PENDING",
        what="both runs to start",
    )
    worker.terminate()
    wait_for(worker.not_ready, what="readiness to drop")
    assert worker.wait_exit(timeout=30) == 0
    assert _row(migrated_url, short)[0] == "SUCCESS"
    assert _row(migrated_url, long) == ("PENDING", "worker-a")
    assert "stay PENDING for recovery under executor worker-a" in worker.output()

    start_worker("worker-a")
    assert client.result(long) == {"nap": {"slept_seconds": 8}}


def test_should_not_claim_new_runs_once_sigterm_arrived(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str
) -> None:
    worker = start_worker("worker-a", DBOS_SHUTDOWN_DRAIN_TIMEOUT_MS="4000")
    busy = client.enqueue(flows.sleep_flow(2.5))
    wait_for(lambda: _row(migrated_url, busy)[0] == "PENDING", what="the run to start")
    worker.terminate()
    wait_for(worker.not_ready, what="readiness to drop")
    late = client.enqueue(flows.sleep_flow(0))
    assert worker.wait_exit(timeout=30) == 0
    assert _row(migrated_url, busy)[0] == "SUCCESS"
    assert _row(migrated_url, late)[0] == "ENQUEUED"


def _signal_thread(pid: int, tid: int, signum: int) -> None:
    """tgkill(2): deliver a signal to one thread of a process, as the kernel may when it signals the process."""
    import ctypes  # noqa: PLC0415
    import platform  # noqa: PLC0415

    numbers = {"x86_64": 234, "aarch64": 131}
    if platform.machine() not in numbers:
        pytest.skip(f"no tgkill syscall number known for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.syscall(numbers[platform.machine()], pid, tid, signum) == 0, ctypes.get_errno()


def test_should_drain_when_sigterm_lands_on_another_thread_than_the_main_one(start_worker: StartWorker) -> None:
    worker = start_worker("worker-a", DBOS_SHUTDOWN_DRAIN_TIMEOUT_MS="1000")
    assert worker.process is not None
    pid = worker.process.pid
    other = next(int(task.name) for task in Path(f"/proc/{pid}/task").iterdir() if int(task.name) != pid)
    _signal_thread(pid, other, signal.SIGTERM)
    wait_for(worker.not_ready, timeout=30, what="readiness to drop")
    assert worker.wait_exit(timeout=30) == 0
