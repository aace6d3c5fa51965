"""Several worker processes in one pod: the supervisor, its processes' executor ids, the pod's one health
port, SIGTERM, and a process that dies."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from fireflow_worker.client import FireflowClient
from tests.support import flows
from tests.support.proc import WorkerProcess, wait_for

StartWorker = Callable[..., WorkerProcess]


def _rows(url: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query, args).fetchall()


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return sorted(found)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_should_run_every_process_under_its_own_executor_id_behind_one_health_port(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str
) -> None:
    pod = start_worker("pool-0", FIREFLOW_WORKER_PROCESSES="3", DBOS_WORKER_CONCURRENCY="2")
    assert pod.get("/readyz") == (200, "ready (3 processes)\n")
    assert pod.get("/healthz") == (200, "ok\n")
    run_ids = [client.enqueue(flows.sleep_flow(0.3)) for _ in range(12)]
    for run_id in run_ids:
        client.result(run_id, timeout_seconds=120)
    executors = {row[0] for row in _rows(migrated_url, "SELECT DISTINCT executor_id FROM dbos.workflow_status")}
    # Concurrency 2 per process and 12 runs of 0.3 s: more than one process had to take some.
    assert len(executors) > 1
    assert executors <= {"pool-0", "pool-0-p1", "pool-0-p2"}
    names = {row[0] for row in _rows(migrated_url, "SELECT DISTINCT application_name FROM pg_stat_activity")}
    assert {"fireflow-worker:pool-0", "fireflow-worker:pool-0-p1", "fireflow-worker:pool-0-p2"} <= names
    metrics = pod.get("/metrics")[1]
    started = [line for line in metrics.splitlines() if line.startswith("fireflow_runs_started_total{")]
    assert {line.split('process="')[1][0] for line in started} <= {"0", "1", "2"}
    assert sum(float(line.split()[-1]) for line in started) == 12
    assert metrics.count("# TYPE fireflow_runs_started_total counter") == 1  # one family, a sample per process


def test_should_drain_every_process_on_sigterm_and_recover_their_runs_after_the_restart(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str
) -> None:
    pod = start_worker(
        "pool-0", FIREFLOW_WORKER_PROCESSES="2", DBOS_WORKER_CONCURRENCY="1", DBOS_SHUTDOWN_DRAIN_TIMEOUT_MS="1000"
    )
    children = _children(pod.pid())
    assert len(children) == 2
    # Long runs on both processes (concurrency 1 each): the drain leaves them PENDING under their own ids.
    sleepy = [client.enqueue(flows.sleep_flow(4)) for _ in range(2)]
    wait_for(
        lambda: len(_rows(migrated_url, "SELECT 1 FROM dbos.workflow_status WHERE status = 'PENDING'")) == 2,
        "both runs to start",
    )
    pod.terminate()
    wait_for(lambda: pod.get("/readyz")[0] == 503, "the pod to say it drains", timeout=2)
    assert pod.wait_exit(timeout=30) == 0
    assert not any(_alive(pid) for pid in children)
    held = {
        row[0] for row in _rows(migrated_url, "SELECT executor_id FROM dbos.workflow_status WHERE status = 'PENDING'")
    }
    assert held <= {"pool-0", "pool-0-p1"} and held
    start_worker("pool-0", FIREFLOW_WORKER_PROCESSES="2")  # the same ids: each process recovers its own
    for run_id in sleepy:
        assert client.result(run_id, timeout_seconds=60) == {"nap": {"slept_seconds": 4}}


def test_should_exit_with_the_status_of_a_process_that_died_after_draining_the_others(
    start_worker: StartWorker,
) -> None:
    pod = start_worker("pool-0", FIREFLOW_WORKER_PROCESSES="2")
    first, second = _children(pod.pid())
    os.kill(second, signal.SIGKILL)
    assert pod.wait_exit(timeout=60) == 128 + signal.SIGKILL  # Kubernetes restarts the pod
    assert not _alive(first)
    assert "exited with status 137: draining the others" in pod.output()


def test_should_take_its_processes_with_it_when_the_supervisor_is_killed(start_worker: StartWorker) -> None:
    pod = start_worker("pool-0", FIREFLOW_WORKER_PROCESSES="2")
    children = _children(pod.pid())
    pod.kill()  # SIGKILL, as when PID 1 of a container dies: nothing may outlive it
    wait_for(lambda: not any(_alive(pid) for pid in children), "the worker processes to end", timeout=10)
