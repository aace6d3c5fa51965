"""The worker's log as a log pipeline reads it: FIREFLOW_LOG_FORMAT=json makes every line of a real worker -
a single process and a supervisor with its processes, DBOS's lines included - one JSON object with a level, a
message and what the line is about; a run's start and end name it at the default level; DBOS's misleading
start lines are gone."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fireflow_worker.client import FireflowClient
from tests.support.proc import WorkerProcess

StartWorker = Callable[..., WorkerProcess]


def three_nodes(fail_last: bool = False) -> dict[str, Any]:
    last: dict[str, Any] = (
        {"type": "fail", "params": {"message": "no luck"}, "after": ["b"]}
        if fail_last
        else {"type": "template", "params": {"template": "done"}, "after": ["b"]}
    )
    return {
        "name": "three",
        "nodes": {
            "a": {"type": "template", "params": {"template": "a"}},
            "b": {"type": "template", "params": {"template": "b"}, "after": ["a"]},
            "c": last,
        },
    }


def json_lines(output: str) -> list[dict[str, Any]]:
    """Every line of the output as JSON; a line that is not fails with the line shown."""
    lines = []
    for text in output.splitlines():
        try:
            line = json.loads(text)
        except json.JSONDecodeError:
            raise AssertionError(f"not a JSON line: {text!r}") from None
        assert isinstance(line, dict), text
        assert line["level"] in ("debug", "info", "warning", "error", "critical"), line
        assert isinstance(line["message"], str), line
        assert isinstance(line["logger"], str), line
        lines.append(line)
    return lines


def _finish(worker: WorkerProcess) -> str:
    worker.terminate()
    assert worker.wait_exit() == 0
    return worker.output()


def test_should_write_every_line_of_a_worker_as_json_with_its_runs_named(
    start_worker: StartWorker, client: FireflowClient
) -> None:
    worker = start_worker("logs-a", FIREFLOW_LOG_FORMAT="json", POD_NAMESPACE="team-a", DBOS_LOG_LEVEL="info")
    ok = client.enqueue(three_nodes())
    failed = client.enqueue(three_nodes(fail_last=True))
    assert client.wait(ok, timeout_seconds=60).status == "SUCCESS"
    assert client.wait(failed, timeout_seconds=60).status == "ERROR"
    lines = json_lines(_finish(worker))
    assert any(line["logger"].startswith("dbos") for line in lines), "DBOS's own lines are in the log"
    assert all(line["executor"] == "logs-a" and line["namespace"] == "team-a" for line in lines)
    # At info, as in the TypeScript FireFlow execution worker, a run writes no line of its own unless it failed.
    assert not [line for line in lines if line.get("run_id") == ok and line["logger"] == "fireflow.worker"]
    ended = next(line for line in lines if line.get("run_id") == failed and "ended after" in line["message"])
    assert "failed: node 'c' failed" in ended["message"] and ended["level"] == "info"
    messages = [line["message"] for line in lines]
    misleading = [m for m in messages if m.startswith("Listening to 0 queues") or "DBOS Conductor" in m]
    assert not misleading
    assert any(m.startswith("DBOS polls no queue of this worker: it claims fireflow-executions") for m in messages)


def test_should_write_every_line_of_a_supervisor_and_its_processes_as_json(
    start_worker: StartWorker, client: FireflowClient
) -> None:
    worker = start_worker("logs-s", FIREFLOW_LOG_FORMAT="JSON", FIREFLOW_WORKER_PROCESSES="2", DBOS_LOG_LEVEL="debug")
    run_id = client.enqueue(three_nodes())
    assert client.wait(run_id, timeout_seconds=60).status == "SUCCESS"
    lines = json_lines(_finish(worker))
    loggers = {line["logger"] for line in lines}
    assert {"fireflow.supervisor", "fireflow.worker"} <= loggers
    assert any(name.startswith("dbos") for name in loggers)
    executors = {line.get("executor") for line in lines if line["logger"] != "fireflow.supervisor"}
    assert executors == {"logs-s", "logs-s-p1"}
    about = [line for line in lines if line.get("run_id") == run_id and line["logger"] == "fireflow.worker"]
    assert any(line["message"].startswith(f"run {run_id} started: flow three") for line in about), about
    assert any(line["message"].startswith(f"run {run_id} ended after ") for line in about), about
    assert {line["level"] for line in about} == {"debug"}, about


def test_should_write_dbos_lines_in_the_workers_text_format(start_worker: StartWorker) -> None:
    worker = start_worker("logs-t")
    output = _finish(worker)
    dbos_lines = [line for line in output.splitlines() if " dbos" in line.split(":")[2]]
    assert dbos_lines, output
    assert all(" INFO dbos" in line or " WARNING dbos" in line for line in dbos_lines), dbos_lines
    assert "[    INFO]" not in output  # DBOS's own console format is gone


def test_should_refuse_an_unknown_log_format_in_one_line(start_worker: StartWorker) -> None:
    worker = start_worker("logs-bad", wait=False, FIREFLOW_LOG_FORMAT="xml")
    assert worker.wait_exit() == 2
    assert "FIREFLOW_LOG_FORMAT='xml'" in worker.output()
    assert "accepted: text or json" in worker.output()
    assert len(worker.output().splitlines()) == 1


def test_should_write_a_bad_setting_as_one_json_line_when_json_is_asked_for(start_worker: StartWorker) -> None:
    worker = start_worker("logs-bad", wait=False, FIREFLOW_LOG_FORMAT="json", DBOS_WORKER_CONCURRENCY="0")
    assert worker.wait_exit() == 2
    (line,) = json_lines(worker.output())
    assert line["level"] == "error"
    assert line["message"].startswith("invalid DBOS_WORKER_CONCURRENCY='0'")
