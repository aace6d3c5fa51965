"""A run's events at either detail: derived from DBOS's records (the default: nothing written per event) or
written live to the run's stream (per run, `fireflow run --follow`, the sandbox queue)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fireflow_worker.client import FireflowClient
from tests.support import flows
from tests.support.proc import WorkerProcess

StartWorker = Callable[..., WorkerProcess]
FIREFLOW_BIN = str(Path(sys.executable).with_name("fireflow"))
FLAKY = {
    "name": "flaky-chain",
    "inputs": {"who": {"type": "string"}},
    "nodes": {
        "greet": {"type": "template", "params": {"template": "Hi ${inputs.who}"}},
        "flaky": {
            "type": "fail",
            "params": {"fail_attempts": 2},
            "retry": {"max_attempts": 3, "interval_seconds": 0.05},
            "after": ["greet"],
        },
        "nap": {"type": "sleep", "params": {"seconds": 1.0}, "after": ["flaky"]},
    },
    "outputs": ["greet", "flaky", "nap"],
}


def _streamed(url: str, run_id: str) -> int:
    """How many values the run wrote to its stream."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM dbos.streams WHERE workflow_uuid = %s", (run_id,)).fetchone()
    return int(row[0]) if row else 0


def test_should_derive_the_events_of_a_run_that_wrote_none(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str
) -> None:
    start_worker()
    run_id = client.enqueue(FLAKY, inputs={"who": "Ada"})
    events = list(client.events(run_id))  # followed live, from the enqueue on
    assert client.result(run_id)["greet"] == "Hi Ada"
    assert _streamed(migrated_url, run_id) == 0  # nothing was written for them
    # The flow travelled with the run: no provision step, one step per node with effects (`greet` is a
    # template: pure, computed in the workflow) and nothing else.
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        steps = conn.execute(
            "SELECT function_name FROM dbos.operation_outputs WHERE workflow_uuid = %s ORDER BY function_id", (run_id,)
        ).fetchall()
    assert [row[0] for row in steps] == ["node:flaky", "node:nap"]
    assert [(e["event"], e.get("node")) for e in events] == [
        ("run.started", None),
        ("node.started", "greet"),
        ("node.finished", "greet"),
        ("node.started", "flaky"),
        ("node.finished", "flaky"),
        ("node.started", "nap"),
        ("node.finished", "nap"),
        ("run.finished", None),
    ]
    by = {(e["event"], e.get("node")): e for e in events}
    assert by["node.started", "greet"]["type"] == "template"
    assert by["node.finished", "flaky"]["attempt"] == 3  # succeeded on its third attempt
    nap_ms = by["node.finished", "nap"]["at_ms"] - by["node.started", "nap"]["at_ms"]
    assert nap_ms >= 1000 and by["node.finished", "nap"]["duration_ms"] >= 1000
    assert by["run.started", None]["flow"] == "flaky-chain"


def test_should_derive_a_failed_node_with_its_attempts_and_the_run_s_error(
    client: FireflowClient, start_worker: StartWorker
) -> None:
    start_worker()
    run_id = client.enqueue(flows.failing_flow())
    events = list(client.events(run_id))
    assert [e["event"] for e in events] == ["run.started", "node.started", "node.failed", "run.failed"]
    assert events[2]["error"].startswith("no luck") and events[2]["attempt"] >= 1
    assert events[3]["error"] == client.status(run_id).error


@pytest.mark.parametrize("branches", [False, True], ids=["chain", "graph"])
def test_should_record_only_the_failure_of_a_pure_node_and_derive_it_like_any_node_s(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str, branches: bool
) -> None:
    start_worker()
    flow: dict[str, Any] = {
        "name": "bad-shape",
        "nodes": {
            "text": {"type": "template", "params": {"template": "not json"}},
            "bad": {"type": "transform", "params": {"value": "${nodes.text}", "ops": ["parse_json"]}},
        },
    }
    if branches:  # a node beside them: the graph executor, on its event loop
        flow["nodes"]["wait"] = {"type": "sleep", "params": {"seconds": 0.5}}
    run_id = client.enqueue(flow)
    events = list(client.events(run_id))
    error = client.status(run_id).error
    assert error is not None and error.startswith("node 'bad' failed: ops[0] (parse_json): ")
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        steps = conn.execute(
            "SELECT function_name, error IS NOT NULL FROM dbos.operation_outputs WHERE workflow_uuid = %s", (run_id,)
        ).fetchall()
    # `text` left no record; `bad` only its failure.
    assert sorted(steps) == sorted([("node:bad", True)] + ([("node:wait", False)] if branches else []))
    pure = [(e["event"], e.get("node")) for e in events if e.get("node") in ("text", "bad")]
    assert pure == [
        ("node.started", "text"),
        ("node.finished", "text"),
        ("node.started", "bad"),
        ("node.failed", "bad"),
    ]
    assert (events[0]["event"], events[-1]["event"]) == ("run.started", "run.failed")
    failed = next(e for e in events if e["event"] == "node.failed")
    assert failed["attempt"] == 1 and error.endswith(failed["error"])


def test_should_write_every_attempt_live_when_the_run_or_its_queue_asks(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str
) -> None:
    start_worker()
    live = client.enqueue(FLAKY, inputs={"who": "Bo"}, events="live")
    events = list(client.events(live))
    assert [e["attempt"] for e in events if e["event"] == "node.started" and e["node"] == "flaky"] == [1, 2, 3]
    assert [e["attempt"] for e in events if e["event"] == "node.failed"] == [1, 2]
    timed = [e for e in events if "duration_ms" in e]
    assert timed and all(isinstance(e["duration_ms"], int) for e in timed)  # whole ms, as the derived ones
    assert _streamed(migrated_url, live) == len(events) + 1  # and the stream's end
    sandbox = client.enqueue(flows.greet_flow(), inputs={"who": "s"}, queue="fireflow-sandbox")
    assert [e["event"] for e in client.events(sandbox)][-1] == "run.finished"
    assert _streamed(migrated_url, sandbox) > 0  # the sandbox queue's default: live
    quiet = client.enqueue(flows.greet_flow(), inputs={"who": "s"}, queue="fireflow-sandbox", events="steps")
    assert [e["event"] for e in client.events(quiet)][-1] == "run.finished"
    assert _streamed(migrated_url, quiet) == 0


def test_should_follow_live_from_the_command_line_and_derive_without_follow(
    start_worker: StartWorker, migrated_url: str, tmp_path: Path
) -> None:
    start_worker()
    flow_file = tmp_path / "greet.json"
    flow_file.write_text(json.dumps(flows.greet_flow()))
    env = {**os.environ, "DATABASE_URL_EXECUTIONS": migrated_url}

    def fireflow(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([FIREFLOW_BIN, *args], env=env, capture_output=True, text=True, timeout=120, check=False)

    followed = fireflow("run", str(flow_file), "--input", "who=x", "--follow")
    assert followed.returncode == 0, followed.stderr
    lines = followed.stdout.splitlines()
    run_id = lines[0].removeprefix("enqueued run ")
    assert [json.loads(line)["event"] for line in lines[1:-1]] == [
        "run.started",
        "node.started",
        "node.finished",
        "run.finished",
    ]
    assert _streamed(migrated_url, run_id) == 5  # --follow asks for live events: four and the stream's end
    derived = fireflow("run", str(flow_file), "--input", "who=y", "--follow", "--events", "steps")
    assert derived.returncode == 0, derived.stderr
    derived_id = derived.stdout.splitlines()[0].removeprefix("enqueued run ")
    assert _streamed(migrated_url, derived_id) == 0
    # The template is pure (no record): derived all the same.
    assert [json.loads(line)["event"] for line in derived.stdout.splitlines()[1:-1]] == [
        "run.started",
        "node.started",
        "node.finished",
        "run.finished",
    ]
    assert json.loads(derived.stdout.splitlines()[-1])["result"] == {"hello": "Hello y"}
    bad = fireflow("run", str(flow_file), "--events", "everything")
    assert bad.returncode == 2 and "invalid choice: 'everything'" in bad.stderr


def test_should_refuse_an_unknown_event_detail_before_enqueueing(client: FireflowClient) -> None:
    with pytest.raises(ValueError, match="unknown event detail 'loud'; known: steps, live"):
        client.enqueue(flows.greet_flow(), inputs={"who": "x"}, events="loud")
