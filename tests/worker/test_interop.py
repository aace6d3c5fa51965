"""The run contract with other languages' callers (docs/run-contract.md): the real TypeScript SDK from npm
(@dbos-inc/dbos-sdk 4.27.6, the platform's, and the newest 5.x) and DBOS-py's own DBOSClient enqueue runs in
every encoding (portable JSON, the TypeScript SDK's superjson, DBOS-py's pickle), read results and errors
back, follow live events while a run runs, list it, cancel and resume it, and hear of its end on
ff_workflow_terminal; a run in an encoding the worker cannot read ends ERROR at once, never PENDING. The
callers are the examples in examples/interop, run as they are."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest
from dbos import DBOSClient, PortableWorkflowError

from fireflow_contract import queues, run_request
from fireflow_worker.client import FireflowClient
from tests.support import flows
from tests.support.proc import WorkerProcess, wait_for
from tests.worker.typescript import INSTALL, REPO_ROOT, SDKS, TypeScriptCaller, installed_modules

StartWorker = Callable[..., WorkerProcess]
SDK_IDS = [f"ts-{version}" for version in SDKS.values()]
STAMPED = {
    "name": "stamped",
    # A BigInt arrives as its decimal string, in the SDK's portable encoding and decoded from superjson alike.
    "inputs": {"who": {"type": "string"}, "when": {"type": "string"}, "count": {"type": "string"}},
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
                "params": {"function": "tests.support.sideeffects:wait_for", "kwargs": {"path": str(gate)}},
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


def _pickle_enqueue(dbos_client: DBOSClient, request: dict[str, Any]) -> str:
    """Enqueue as a Python service would without a second thought: DBOS-py's default encoding, pickle."""
    options: Any = {"queue_name": queues.EXECUTIONS, "workflow_name": run_request.WORKFLOW_NAME}
    return str(dbos_client.enqueue(options, request).get_workflow_id())


def _read_until_gate(reader: subprocess.Popen[str]) -> list[dict[str, Any]]:
    """The events a reader printed until the gated flow's run reached its gate."""
    assert reader.stdout is not None
    seen: list[dict[str, Any]] = []
    while not (seen and seen[-1].get("event") == "node.started" and seen[-1].get("node") == "gate"):
        line = reader.stdout.readline()
        assert line, f"the stream ended early: {seen} {reader.stderr.read() if reader.stderr else ''}"
        seen.append(json.loads(line))
    return seen


def _metrics(worker: WorkerProcess) -> str:
    return worker.get("/metrics")[1]


@pytest.fixture
def dbos_py(migrated_url: str) -> Iterator[DBOSClient]:
    """DBOS-py's own DBOSClient, connected as examples/interop/python_client.py connects."""
    dbos_client: DBOSClient = _python_example().connect(migrated_url)
    yield dbos_client
    dbos_client.destroy()


@pytest.fixture(params=list(SDKS), ids=SDK_IDS)
def typescript(request: pytest.FixtureRequest, migrated_url: str) -> TypeScriptCaller:
    return TypeScriptCaller(migrated_url, str(request.param))


@pytest.mark.parametrize("encoding", ["superjson", "portable"])
def test_should_run_a_typescript_enqueue_and_resolve_its_result(
    typescript: TypeScriptCaller, encoding: str, start_worker: StartWorker, client: FireflowClient, migrated_url: str
) -> None:
    worker = start_worker()
    run_id = typescript.enqueue({"flow": STAMPED, "inputs": STAMPED_INPUTS}, encoding)
    assert typescript.result(run_id) == {"output": STAMPED_OUTPUT}
    # The run is stored as portable JSON from its claim on: this package's client reads it too.
    assert _status(migrated_url, run_id) == ("SUCCESS", "portable_json")
    assert client.status(run_id).output == STAMPED_OUTPUT
    decoded = 1 if encoding == "superjson" else 0
    assert _metrics(worker).count('fireflow_run_encodings_total{encoding="js_superjson",outcome="decoded"} 1.0') == (
        decoded
    )


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
    typescript: TypeScriptCaller,
    encoding: str,
    inputs: dict[str, Any],
    message: str,
    start_worker: StartWorker,
    client: FireflowClient,
    dbos_py: DBOSClient,
    migrated_url: str,
) -> None:
    worker = start_worker()
    run_id = typescript.enqueue({"flow": flows.greet_flow(), "inputs": inputs}, encoding)
    assert _wait_ended(migrated_url, run_id) == "ERROR"
    error = typescript.result(run_id)["error"]
    assert error["message"].startswith(message)
    assert "serializationType 'portable'" in error["message"]
    assert "\n" not in error["message"]
    assert client.status(run_id).error == error["message"]  # every SDK reads the same line
    label = "java_jackson" if encoding == "java" else "js_superjson"
    metrics = _metrics(worker)
    assert f'fireflow_run_encodings_total{{encoding="{label}",outcome="unreadable"}} 1.0' in metrics
    # A run ended at claim is a failed run: the failure alert sees it.
    assert 'fireflow_runs_failed_total{queue="fireflow-executions"} 1.0' in metrics
    # Its input is listed by every SDK: the encoding it was sent in and the stored text, in portable JSON.
    listed = typescript.listing(run_id)
    assert listed["status"] == "ERROR"
    (sent,) = listed["input"]
    assert sent["encoding"] == label and "greet" in sent["stored"]
    (row,) = dbos_py.list_workflows(workflow_ids=[run_id], load_input=True)
    assert row.input is not None and list(row.input["args"]) == [sent]
    # The worker goes on: the next run (portable) succeeds.
    ok = typescript.enqueue({"flow": flows.greet_flow(), "inputs": {"who": "Ada"}}, "portable")
    assert "output" in typescript.result(ok)


@pytest.mark.parametrize("enqueuer", ["typescript", "fireflow-client", "dbos-py-pickle"])
def test_should_stream_live_events_to_a_typescript_reader_while_the_run_runs(
    typescript: TypeScriptCaller,
    enqueuer: str,
    start_worker: StartWorker,
    client: FireflowClient,
    dbos_py: DBOSClient,
    migrated_url: str,
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    flow = _gated_flow(gate)
    start_worker()
    if enqueuer == "typescript":
        run_id = typescript.enqueue({"flow": flow, "inputs": {}, "events": "live"})
    elif enqueuer == "fireflow-client":
        run_id = client.enqueue(flow, events="live")
    else:
        run_id = _pickle_enqueue(dbos_py, {"flow": flow, "inputs": {}, "events": "live"})
    reader = typescript.follow(run_id)
    seen = _read_until_gate(reader)
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


def test_should_give_every_sdk_the_result_and_error_of_a_run_dbos_py_enqueued_in_pickle(
    typescript: TypeScriptCaller, start_worker: StartWorker, dbos_py: DBOSClient, migrated_url: str
) -> None:
    worker = start_worker()
    when = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)  # a Python datetime: DBOS-py's portable form, an ISO string
    inputs = {"who": "Ada", "when": when, "count": "12345678901234567890"}
    stamped = _pickle_enqueue(dbos_py, {"flow": STAMPED, "inputs": inputs})
    failing = _pickle_enqueue(dbos_py, {"flow": flows.failing_flow(), "inputs": {}})
    assert typescript.result(stamped) == {"output": STAMPED_OUTPUT}
    failure = typescript.result(failing)["error"]
    # DBOS-py's own client reads them back as well.
    assert _python_example().run_result(dbos_py, stamped) == STAMPED_OUTPUT
    with pytest.raises(PortableWorkflowError, match=r"^node 'boom' failed"):
        _python_example().run_result(dbos_py, failing)
    assert failure["name"] == "RunFailedError" and failure["message"].startswith("node 'boom' failed")
    assert _status(migrated_url, stamped) == ("SUCCESS", "portable_json")
    assert _status(migrated_url, failing) == ("ERROR", "portable_json")
    assert 'fireflow_run_encodings_total{encoding="py_pickle",outcome="decoded"} 2.0' in _metrics(worker)


def test_should_end_a_pickled_request_with_no_json_form_as_error_naming_it(
    typescript: TypeScriptCaller, start_worker: StartWorker, dbos_py: DBOSClient, migrated_url: str
) -> None:
    worker = start_worker()
    run_id = _pickle_enqueue(dbos_py, {"flow": flows.greet_flow(), "inputs": {"who": b"Ada"}})
    assert _wait_ended(migrated_url, run_id) == "ERROR"
    with pytest.raises(PortableWorkflowError) as failure:
        _python_example().run_result(dbos_py, run_id)
    assert failure.value.message.startswith(
        "invalid run request: inputs.who is a Python bytes, which a run request cannot carry; send it as JSON data, "
        "or enqueue it in DBOS's portable JSON"
    )
    assert typescript.result(run_id)["error"]["message"] == failure.value.message
    # DBOS-py 3.4 keeps the input of what it enqueues in workflow_input, which a 4.x reader does not read.
    listed = typescript.listing(run_id)
    if SDKS[typescript.sdk].startswith("4."):
        assert "input" not in listed
    else:
        assert listed["input"][0]["encoding"] == "py_pickle"
    assert 'fireflow_run_encodings_total{encoding="py_pickle",outcome="unreadable"} 1.0' in _metrics(worker)


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


def test_should_complete_a_superjson_run_cancelled_while_enqueued_then_resumed_through_dbos_s_queue_thread(
    typescript: TypeScriptCaller, start_worker: StartWorker, migrated_url: str
) -> None:
    run_id = typescript.enqueue({"flow": STAMPED, "inputs": STAMPED_INPUTS})  # no worker yet: it stays ENQUEUED
    typescript.cancel(run_id)
    assert _status(migrated_url, run_id) == ("CANCELLED", "js_superjson")
    start_worker()
    # Resumed, it goes to DBOS's internal queue, which DBOS's own queue thread claims (not the worker's claimers).
    typescript.resume(run_id)
    assert _wait_ended(migrated_url, run_id) == "SUCCESS"
    assert typescript.result(run_id) == {"output": STAMPED_OUTPUT}
    assert _status(migrated_url, run_id) == ("SUCCESS", "portable_json")


def test_should_refuse_to_start_when_dbos_s_queue_thread_cannot_be_routed(
    start_worker: StartWorker, migrated_url: str, tmp_path: Path
) -> None:
    # A dbos whose queue thread dispatches through another name: the worker could not make a resumed run portable.
    (tmp_path / "sitecustomize.py").write_text("import dbos._queue\ndel dbos._queue.execute_dequeued_workflow\n")
    worker = start_worker(wait=False, PYTHONPATH=f"{tmp_path}:{REPO_ROOT}")
    assert worker.wait_exit(timeout=90) == 1
    (line,) = [line for line in worker.output().splitlines() if "cannot start" in line]
    assert "has no dispatch of its queue thread the worker can route" in line
    assert "install the dbos version this fireflow-pool release pins" in line


def test_should_notify_ff_workflow_terminal_of_typescript_runs_that_succeed_fail_and_are_cancelled(
    typescript: TypeScriptCaller, start_worker: StartWorker, migrated_url: str, tmp_path: Path
) -> None:
    listener = psycopg.connect(migrated_url, autocommit=True)
    listener.execute(f"LISTEN {run_request.TERMINAL_CHANNEL}")
    start_worker()
    ok = typescript.enqueue({"flow": flows.greet_flow(), "inputs": {"who": "Ada"}})
    unreadable = typescript.enqueue({"flow": flows.greet_flow(), "inputs": {"who": "Ada"}}, "java")
    gated = typescript.enqueue({"flow": _gated_flow(tmp_path / "gate"), "inputs": {}})
    wait_for(lambda: _status(migrated_url, gated)[0] == "PENDING", "the gated run to start", timeout=90)
    typescript.cancel(gated)
    received: dict[str, dict[str, Any]] = {}
    for notify in listener.notifies(timeout=90):
        payload = json.loads(notify.payload)
        received[payload["workflow_id"]] = payload
        if len(received) == 3:
            break
    listener.close()
    assert received == {
        ok: {"workflow_id": ok, "status": "SUCCESS"},
        unreadable: {"workflow_id": unreadable, "status": "ERROR"},
        gated: {"workflow_id": gated, "status": "CANCELLED"},
    }


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


def test_should_install_the_sdks_once_when_three_processes_start_on_a_cold_cache(tmp_path: Path) -> None:
    # A cold install directory; npm's own cache is the warm one of this machine (no download, as in CI's second run).
    warm_npm_cache = installed_modules().parents[1] / "cache"
    (tmp_path / "npm").mkdir()
    (tmp_path / "npm" / "cache").symlink_to(warm_npm_cache)
    env = {**os.environ, "FIREFLOW_CACHE_DIR": str(tmp_path)}
    installers = [
        subprocess.Popen(["bash", str(INSTALL)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    done = [installer.communicate(timeout=600) for installer in installers]
    assert [installer.returncode for installer in installers] == [0, 0, 0], [err for _, err in done]
    printed = {out.strip().splitlines()[-1] for out, _ in done}
    assert len(printed) == 1
    assert sum(err.count("npm ci of") for _, err in done) == 1  # one installed, the others waited for it
    dest = Path(printed.pop())
    assert (dest / ".installed").is_file()
    for module, version in SDKS.items():
        assert json.loads((dest / "node_modules" / module / "package.json").read_text())["version"] == version
    assert sorted(path.name for path in (tmp_path / "npm").iterdir()) == ["cache", dest.name]  # no work dir left
