"""The run contract with other languages' callers (docs/run-contract.md): the real TypeScript SDK from npm
(@dbos-inc/dbos-sdk 4.27.6, the platform's, and the newest 5.x) and DBOS-py's own DBOSClient enqueue runs in
every encoding, read results and errors back, follow live events while a run runs, cancel and resume it; a
run in an encoding the worker cannot read ends ERROR at once, never PENDING. The callers are the examples in
examples/interop, run as they are."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest

from fireflow_worker.client import FireflowClient
from tests.worker import flows
from tests.worker.proc import WorkerProcess, wait_for
from tests.worker.typescript import REPO_ROOT, SDKS, TypeScriptCaller

StartWorker = Callable[..., WorkerProcess]
SDK_IDS = [f"ts-{version}" for version in SDKS.values()]
STAMPED = {
    "name": "stamped",
    "inputs": {"who": {"type": "string"}, "when": {"type": "string"}, "count": {"type": "integer"}},
    "nodes": {
        "hello": {"type": "template", "params": {"template": "Hello ${inputs.who} at ${inputs.when} (${inputs.count})"}}
    },
}
# What a TypeScript caller's request holds: a Date and a BigInt (the SDK's default encoding keeps their types).
STAMPED_INPUTS = {
    "who": "Ada",
    "when": {"$date": "2026-12-03T08:00:00.000Z"},
    "count": {"$bigint": "12345678901234567890"},
}
STAMPED_OUTPUT = {"hello": "Hello Ada at 2026-12-03T08:00:00.000Z (12345678901234567890)"}


def _python_example() -> ModuleType:
    path = REPO_ROOT / "examples" / "interop" / "python_client.py"
    spec = importlib.util.spec_from_file_location("fireflow_interop_python_client", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _gated_flow(gate: Path) -> dict[str, Any]:
    """hello, then a node that waits until the test opens the gate, then done: a run that runs while we look."""
    return {
        "name": "gated",
        "nodes": {
            "hello": {"type": "template", "params": {"template": "hi"}},
            "gate": {
                "type": "python",
                "params": {"function": "tests.worker.sideeffects:wait_for", "kwargs": {"path": str(gate)}},
                "after": ["hello"],
            },
            "done": {"type": "template", "params": {"template": "done"}, "after": ["gate"]},
        },
        "outputs": ["done"],
    }


def _status(url: str, run_id: str) -> tuple[str, str | None]:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT status, serialization FROM dbos.workflow_status WHERE workflow_uuid = %s", (run_id,)
        ).fetchone()
    assert row is not None
    return str(row[0]), row[1]


def _wait_ended(url: str, run_id: str) -> str:
    wait_for(lambda: _status(url, run_id)[0] not in ("ENQUEUED", "PENDING"), f"run {run_id} to end", timeout=90)
    return _status(url, run_id)[0]


@pytest.fixture(params=list(SDKS), ids=SDK_IDS)
def typescript(request: pytest.FixtureRequest, migrated_url: str) -> TypeScriptCaller:
    return TypeScriptCaller(migrated_url, str(request.param))


@pytest.fixture
def typescript_4(migrated_url: str) -> TypeScriptCaller:
    return TypeScriptCaller(migrated_url, "@dbos-inc/dbos-sdk")


@pytest.mark.parametrize("encoding", ["superjson", "portable"])
def test_should_run_a_typescript_enqueue_and_resolve_its_result(
    typescript: TypeScriptCaller, encoding: str, start_worker: StartWorker, client: FireflowClient, migrated_url: str
) -> None:
    start_worker()
    # The portable encoding writes a BigInt as a string: a portable caller sends a JavaScript number.
    inputs = STAMPED_INPUTS if encoding == "superjson" else {**STAMPED_INPUTS, "count": 42}
    output = (
        STAMPED_OUTPUT
        if encoding == "superjson"
        else {"hello": STAMPED_OUTPUT["hello"].replace("12345678901234567890", "42")}
    )
    run_id = typescript.enqueue({"flow": STAMPED, "inputs": inputs}, encoding)
    assert typescript.result(run_id) == {"output": output}
    # The run is stored as portable JSON from its claim on: this package's client reads it too.
    assert _status(migrated_url, run_id) == ("SUCCESS", "portable_json")
    assert client.status(run_id).output == output


@pytest.mark.parametrize("encoding", ["superjson", "portable"])
def test_should_reject_getresult_with_the_run_s_error(
    typescript: TypeScriptCaller, encoding: str, start_worker: StartWorker, migrated_url: str
) -> None:
    start_worker()
    failing = typescript.enqueue({"flow": flows.failing_flow(), "inputs": {}}, encoding)
    invalid = typescript.enqueue({"flow": flows.greet_flow(), "inputs": {"who": 3}}, encoding)
    failure = typescript.result(failing)["error"]
    assert failure["name"] == "RunFailedError"
    assert failure["message"].startswith("node 'boom' failed")
    assert typescript.result(invalid)["error"] == {
        "name": "RunFailedError",
        "message": "invalid run inputs: input 'who': 3 is not of type string",
    }


@pytest.mark.parametrize(
    ("encoding", "inputs", "message"),
    [
        ("java", {"who": "Ada"}, "the run request is encoded as 'java_jackson', which this worker cannot read: "),
        (
            "superjson",
            {"who": {"$regexp": "^A"}},
            "invalid run request: inputs.who is a JavaScript RegExp, which a run request cannot carry; ",
        ),
    ],
    ids=["java-style-encoding", "regexp-in-superjson"],
)
def test_should_end_a_run_it_cannot_read_as_error_never_pending(
    typescript_4: TypeScriptCaller,
    encoding: str,
    inputs: dict[str, Any],
    message: str,
    start_worker: StartWorker,
    client: FireflowClient,
    migrated_url: str,
) -> None:
    worker = start_worker()
    run_id = typescript_4.enqueue({"flow": flows.greet_flow(), "inputs": inputs}, encoding)
    assert _wait_ended(migrated_url, run_id) == "ERROR"
    error = typescript_4.result(run_id)["error"]
    assert error["message"].startswith(message)
    assert "serializationType 'portable'" in error["message"]
    assert "\n" not in error["message"]
    assert client.status(run_id).error == error["message"]  # every SDK reads the same line
    label = "java_jackson" if encoding == "java" else "js_superjson"
    metrics = worker.get("/metrics")[1]
    assert f'fireflow_run_encodings_total{{encoding="{label}",outcome="unreadable"}} 1.0' in metrics
    # The worker goes on: the next run (portable) succeeds.
    ok = typescript_4.enqueue({"flow": flows.greet_flow(), "inputs": {"who": "Ada"}}, "portable")
    assert "output" in typescript_4.result(ok)


@pytest.mark.parametrize("enqueuer", ["typescript", "fireflow-client"])
def test_should_stream_live_events_to_a_typescript_reader_while_the_run_runs(
    typescript: TypeScriptCaller,
    enqueuer: str,
    start_worker: StartWorker,
    client: FireflowClient,
    migrated_url: str,
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    flow = _gated_flow(gate)
    start_worker()
    if enqueuer == "typescript":
        run_id = typescript.enqueue({"flow": flow, "inputs": {}, "events": "live"})
    else:
        run_id = client.enqueue(flow, events="live")
    reader = typescript.follow(run_id)
    assert reader.stdout is not None
    seen: list[dict[str, Any]] = []
    while not (seen and seen[-1].get("event") == "node.started" and seen[-1].get("node") == "gate"):
        line = reader.stdout.readline()
        assert line, f"the stream ended early: {seen} {reader.stderr.read() if reader.stderr else ''}"
        seen.append(json.loads(line))
    assert _status(migrated_url, run_id)[0] == "PENDING"  # read live: the run waits at its gate
    gate.touch()
    rest, err = reader.communicate(timeout=90)
    assert reader.returncode == 0, err
    seen += [json.loads(line) for line in rest.splitlines()]
    assert [(e["event"], e.get("node")) for e in seen] == [
        ("run.started", None),
        ("node.started", "hello"),
        ("node.finished", "hello"),
        ("node.started", "gate"),
        ("node.finished", "gate"),
        ("node.started", "done"),
        ("node.finished", "done"),
        ("run.finished", None),
    ]
    assert typescript.result(run_id) == {"output": {"done": "done"}}


def test_should_cancel_and_resume_a_run_from_typescript(
    typescript: TypeScriptCaller, start_worker: StartWorker, migrated_url: str, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    start_worker()
    run_id = typescript.enqueue({"flow": _gated_flow(gate), "inputs": {}, "events": "live"})
    reader = typescript.follow(run_id)
    assert reader.stdout is not None
    while '"gate"' not in reader.stdout.readline():  # the run is at its gate
        pass
    typescript.cancel(run_id)
    assert _status(migrated_url, run_id)[0] == "CANCELLED"
    reader.kill()
    reader.communicate()
    gate.touch()
    typescript.resume(run_id)
    assert typescript.result(run_id) == {"output": {"done": "done"}}
    assert _status(migrated_url, run_id)[0] == "SUCCESS"


def test_should_run_a_stored_flow_by_reference_from_typescript(
    typescript: TypeScriptCaller, start_worker: StartWorker, client: FireflowClient
) -> None:
    client.save_flow("greet", flows.greet_flow())
    start_worker()
    run_id = typescript.enqueue({"flow_ref": "greet", "inputs": {"who": "Ada"}})
    assert typescript.result(run_id) == {"output": {"hello": "Hello Ada"}}


def test_should_serve_dbos_py_s_own_client_and_plain_sql(start_worker: StartWorker, migrated_url: str) -> None:
    example = _python_example()
    start_worker()
    dbos_client = example.connect(migrated_url)
    try:
        ok = example.enqueue_run(dbos_client, {"flow": flows.greet_flow(), "inputs": {"who": "Ada"}, "events": "live"})
        bad = example.enqueue_run(dbos_client, {"flow": flows.failing_flow(), "inputs": {}})
        output = example.run_result(dbos_client, ok)
        events = [event["event"] for event in example.run_events(dbos_client, ok)]
        with pytest.raises(Exception, match=r"^node 'boom' failed") as failure:
            example.run_result(dbos_client, bad)
    finally:
        dbos_client.destroy()
    assert events[0] == "run.started" and events[-1] == "run.finished"
    assert type(failure.value).__name__ == "PortableWorkflowError"
    sql = (REPO_ROOT / "examples" / "interop" / "run_outcome.sql").read_text()
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        read_ok = conn.execute(sql, {"run_id": ok}).fetchone()
        read_bad = conn.execute(sql, {"run_id": bad}).fetchone()
        # What DBOS-TS 4.x reads: workflow_status alone.
        legacy = conn.execute(
            "SELECT output, error FROM dbos.workflow_status WHERE workflow_uuid = ANY(%s) ORDER BY workflow_uuid = %s",
            ([ok, bad], bad),
        ).fetchall()
    assert read_ok == ("SUCCESS", "portable_json", output, None)
    assert read_bad is not None and read_bad[:3] == ("ERROR", "portable_json", None)
    assert str(read_bad[3]).startswith("node 'boom' failed")
    assert json.loads(legacy[0][0]) == output and legacy[0][1] is None
    assert json.loads(legacy[1][1])["message"] == read_bad[3]


def test_should_enqueue_in_portable_json_with_this_package_s_client(
    client: FireflowClient, migrated_url: str, start_worker: StartWorker
) -> None:
    run_id = client.enqueue(flows.greet_flow(), inputs={"who": "Ada"})
    assert _status(migrated_url, run_id) == ("ENQUEUED", "portable_json")
    start_worker()
    assert client.result(run_id, timeout_seconds=60) == {"hello": "Hello Ada"}
