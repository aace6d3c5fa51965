"""Errors read as sentences: whatever makes a run fail on the worker (an invalid flow or inputs from another
enqueuer, a stored flow changed or deleted after enqueue, a malformed request), it emits `run.started` and
`run.failed`, and `--follow`, `status` and the stream carry the same one-line message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dbos import DBOSClient

from fireflow_worker.client import FireflowClient
from fireflow_worker.engine import WORKFLOW_NAME
from tests.support import flows
from tests.support.proc import WorkerProcess

StartWorker = Callable[..., WorkerProcess]
FIREFLOW_BIN = str(Path(sys.executable).with_name("fireflow"))
BROKEN = {
    "name": "broken",
    "nodes": {"a": {"type": "nope"}, "b": {"type": "template", "params": {"template": "${nodes.zz}"}}},
}
BROKEN_MESSAGE = (
    "invalid flow: node 'a': type: unknown node type 'nope' (known: fail, http, python, sleep, template, "
    "transform); node 'b': params.template: ${nodes.zz} names unknown node 'zz'"
)


@pytest.fixture
def raw_client(migrated_url: str) -> Iterator[DBOSClient]:
    """An enqueuer that is not this package's client (the API, Flame Chorus): it validates nothing."""
    client = DBOSClient(system_database_url=migrated_url)
    yield client
    client.destroy()


def _raw_enqueue(client: DBOSClient, request: Any) -> str:
    handle: Any = client.enqueue({"queue_name": "fireflow-executions", "workflow_name": WORKFLOW_NAME}, request)
    return str(handle.get_workflow_id())


def _fireflow(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL_EXECUTIONS": url}
    return subprocess.run([FIREFLOW_BIN, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(
    ("request_", "flow_label", "message"),
    [
        ({"flow": BROKEN, "inputs": {}}, "broken", BROKEN_MESSAGE),
        (
            {"flow": flows.greet_flow(), "inputs": {"who": 3, "extra": True}},
            "greet",
            "invalid run inputs: input 'extra' is not declared by flow 'greet' (declared: who); "
            "input 'who': 3 is not of type string",
        ),
        ({"flow_ref": "never-saved", "inputs": {}}, "never-saved", "no stored flow named 'never-saved'"),
        ({"inputs": {}}, None, "invalid run request: it must carry exactly one of flow and flow_ref"),
        ("not even an object", None, "invalid run request: it must carry exactly one of flow and flow_ref"),
    ],
    ids=["invalid-flow", "invalid-inputs", "missing-stored-flow", "no-flow", "not-an-object"],
)
def test_should_fail_with_one_readable_line_and_both_run_events(
    client: FireflowClient,
    raw_client: DBOSClient,
    start_worker: StartWorker,
    migrated_url: str,
    request_: Any,
    flow_label: str | None,
    message: str,
) -> None:
    start_worker()
    run_id = _raw_enqueue(raw_client, request_)
    with pytest.raises(Exception, match="^" + message.replace("$", r"\$").replace("(", r"\(").replace(")", r"\)")):
        client.result(run_id, timeout_seconds=60)
    assert client.status(run_id).error == message
    events = list(client.events(run_id))
    assert [(e["event"], e.get("flow"), e.get("error")) for e in events] == [
        ("run.started", flow_label, None),
        ("run.failed", None, message),
    ]
    status = json.loads(_fireflow(migrated_url, "status", run_id).stdout)
    assert (status["status"], status["error"]) == ("ERROR", message)


def test_should_follow_a_stored_flow_that_turned_invalid_after_enqueue(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str
) -> None:
    client.save_flow("changing", flows.greet_flow())
    env = {**os.environ, "DATABASE_URL_EXECUTIONS": migrated_url}
    follow = subprocess.Popen(
        [FIREFLOW_BIN, "run", "changing", "--ref", "--input", "who=x", "--follow"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert follow.stdout is not None
    first = follow.stdout.readline()
    assert first.startswith("enqueued run ")
    run_id = first.split()[-1]
    with psycopg.connect(migrated_url) as conn:  # someone stores a broken flow under the name meanwhile
        conn.execute("UPDATE fireflow.flows SET definition = %s WHERE name = 'changing'", (json.dumps(BROKEN),))
    start_worker()
    out, err = follow.communicate(timeout=120)
    assert follow.returncode == 1, err
    lines = out.splitlines()
    assert [json.loads(line)["event"] for line in lines[:-1]] == ["run.started", "run.failed"]
    assert lines[-1] == f"run {run_id} failed: {BROKEN_MESSAGE}"
