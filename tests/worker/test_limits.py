"""Bounded resources per run, with a real worker: node outputs and a run's stored outputs are limited (the
node fails naming the limit), a run's nodes run at most FIREFLOW_MAX_PARALLEL_NODES at once and another run
on the same worker is not starved, the node count is checked before a run starts, and a `sleep` node's
`node.finished` comes after its sleep."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dbos import DBOSClient

from fireflow_worker.client import FireflowClient
from fireflow_worker.engine import WORKFLOW_NAME
from fireflow_worker.flows.validate import FlowValidationError
from tests.support import flows
from tests.support.proc import WorkerProcess

StartWorker = Callable[..., WorkerProcess]
CALL = "tests.support.sideeffects:"


def _stored_bytes(url: str, run_id: str) -> int:
    """What the run's steps and result take in the database."""
    with psycopg.connect(url) as conn:
        steps = conn.execute(
            "SELECT coalesce(sum(pg_column_size(output)), 0) FROM dbos.operation_outputs WHERE workflow_uuid = %s",
            (run_id,),
        ).fetchone()
        result = conn.execute(
            "SELECT coalesce(pg_column_size(output), 0) FROM dbos.workflow_status WHERE workflow_uuid = %s", (run_id,)
        ).fetchone()
    assert steps is not None and result is not None
    return int(steps[0]) + int(result[0])


def test_should_fail_a_flow_that_doubles_a_string_at_the_node_limit(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str
) -> None:
    start_worker()
    nodes: dict[str, Any] = {"d0": {"type": "template", "params": {"template": "${inputs.start}"}}}
    for i in range(1, 20):  # 1 KiB doubled 19 times would be 512 MiB
        nodes[f"d{i}"] = {"type": "template", "params": {"template": f"${{nodes.d{i - 1}}}${{nodes.d{i - 1}}}"}}
    flow = {"name": "doubling", "inputs": {"start": {"type": "string"}}, "nodes": nodes}
    run_id = client.enqueue(flow, inputs={"start": "x" * 1024})
    with pytest.raises(Exception, match=r"node 'd12' failed: .*more than 4 MiB .*\(FIREFLOW_MAX_NODE_OUTPUT_BYTES\)"):
        client.result(run_id, timeout_seconds=120)
    assert _stored_bytes(migrated_url, run_id) < 16 * 1024 * 1024


def test_should_fail_a_node_whose_output_is_over_the_limit(client: FireflowClient, start_worker: StartWorker) -> None:
    start_worker(FIREFLOW_MAX_NODE_OUTPUT_BYTES="100000")
    flow = {
        "name": "big",
        "nodes": {"big": {"type": "python", "params": {"function": CALL + "big_string", "kwargs": {"size": 200_000}}}},
    }
    run_id = client.enqueue(flow)
    with pytest.raises(Exception) as caught:
        client.result(run_id, timeout_seconds=60)
    assert str(caught.value) == (
        "node 'big' failed: the output is 195 KiB, more than the 97.7 KiB a node may produce "
        "(FIREFLOW_MAX_NODE_OUTPUT_BYTES)"
    )
    failed = [e for e in client.events(run_id) if e["event"] == "node.failed"]
    assert [e["attempt"] for e in failed] == [1]  # not retried: another attempt would produce the same


def test_should_fail_the_node_that_takes_the_run_over_its_total(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str
) -> None:
    start_worker(FIREFLOW_MAX_NODE_OUTPUT_BYTES="100000", FIREFLOW_MAX_RUN_OUTPUT_BYTES="250000")
    chunk = {"type": "python", "params": {"function": CALL + "big_string", "kwargs": {"size": 90_000}}}
    flow = {
        "name": "many-chunks",
        "nodes": {
            "c1": chunk,
            "c2": chunk | {"after": ["c1"]},
            "c3": chunk | {"after": ["c2"]},
            "c4": chunk | {"after": ["c3"]},
        },
    }
    run_id = client.enqueue(flow)
    with pytest.raises(Exception) as caught:
        client.result(run_id, timeout_seconds=60)
    assert str(caught.value) == (
        "node 'c3' failed: the run's stored outputs would reach 264 KiB, more than the 244 KiB a run may store "
        "(FIREFLOW_MAX_RUN_OUTPUT_BYTES)"
    )
    assert _stored_bytes(migrated_url, run_id) < 250_000


def test_should_run_at_most_the_parallel_limit_of_a_wide_flow_and_not_starve_other_runs(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str, tmp_path: Path
) -> None:
    trace = tmp_path / "overlap.txt"
    start_worker(FIREFLOW_MAX_PARALLEL_NODES="4", DBOS_SYSTEM_DATABASE_POOL_SIZE="10")
    node = {"type": "python", "params": {"function": CALL + "overlap", "kwargs": {"path": str(trace), "seconds": 0.1}}}
    wide = client.enqueue({"name": "wide", "nodes": {f"n{i}": node for i in range(300)}})
    # Another run on the same worker finishes while the wide one is still going.
    other = client.enqueue(flows.greet_flow(), inputs={"who": "other"})
    assert client.result(other, timeout_seconds=60) == {"hello": "Hello other"}
    assert client.status(wide).status == "PENDING"
    assert len(client.result(wide, timeout_seconds=300)) == 300
    intervals = [tuple(map(float, line.split())) for line in trace.read_text().splitlines()]
    assert len(intervals) == 300
    points = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = most = 0
    for _, change in points:
        running += change
        most = max(most, running)
    assert most == 4


def test_should_refuse_a_flow_over_the_node_count_before_it_runs(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str
) -> None:
    nodes = {f"n{i}": {"type": "template", "params": {"template": "x"}} for i in range(1001)}
    with pytest.raises(FlowValidationError, match=r"nodes: 1001 nodes, more than the limit of 1000"):
        client.enqueue({"name": "huge", "nodes": nodes})
    # Another enqueuer may not check: the worker does, before any node runs.
    start_worker()
    raw = DBOSClient(system_database_url=migrated_url)
    try:
        handle: Any = raw.enqueue(
            {"queue_name": "fireflow-executions", "workflow_name": WORKFLOW_NAME},
            {"flow": {"name": "huge", "nodes": nodes}, "inputs": {}},
        )
    finally:
        raw.destroy()
    with pytest.raises(
        Exception, match=r"^invalid flow: nodes: 1001 nodes, more than the limit of 1000 \(FIREFLOW_MAX"
    ):
        client.result(handle.get_workflow_id(), timeout_seconds=60)


def test_should_report_a_sleep_finished_after_the_sleep(client: FireflowClient, start_worker: StartWorker) -> None:
    start_worker()
    run_id = client.enqueue(flows.sleep_flow(1.5))
    assert client.result(run_id, timeout_seconds=60) == {"nap": {"slept_seconds": 1.5}}
    events = {e["event"]: e for e in client.events(run_id) if e["event"].startswith("node.")}
    assert events["node.finished"]["at_ms"] - events["node.started"]["at_ms"] >= 1500
    assert events["node.finished"]["duration_ms"] >= 1500
