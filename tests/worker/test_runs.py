"""Runs end to end through a real worker: every built-in node type, events, the run-end NOTIFY, metrics,
flows by reference and the provision cache, and validation before enqueue."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fireflow_worker.client import FireflowClient
from fireflow_worker.flows.validate import FlowValidationError
from tests.support import flows
from tests.support.proc import WorkerProcess

StartWorker = Callable[..., WorkerProcess]


@pytest.fixture
def http_server() -> Iterator[str]:
    """A local HTTP endpoint that echoes what it gets and fails on /flaky until its third call."""
    calls = {"flaky": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path == "/flaky":
                calls["flaky"] += 1
                if calls["flaky"] < 3:
                    self.send_response(503)
                    self.end_headers()
                    return
            payload = json.dumps({"path": self.path, "got": json.loads(body or b"null")}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _count_runs(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM dbos.workflow_status").fetchone()
    return int(row[0]) if row else 0


def test_should_run_every_builtin_node_type_when_a_flow_uses_them_all(
    client: FireflowClient, start_worker: StartWorker, http_server: str, tmp_path: Path
) -> None:
    start_worker()
    flow = {
        "name": "all-types",
        "inputs": {"who": {"type": "string"}, "n": {"type": "integer", "default": 2, "required": False}},
        "nodes": {
            "greeting": {"type": "template", "params": {"template": "Hi ${inputs.who}"}},
            "shape": {"type": "transform", "params": {"value": {"who": "${inputs.who}", "n": "${inputs.n}"}}},
            "post": {
                "type": "http",
                "params": {"method": "POST", "url": f"{http_server}/flaky", "json": "${nodes.shape}"},
                "retry": {"max_attempts": 5, "interval_seconds": 0.05, "backoff_rate": 1.0},
            },
            "nap": {"type": "sleep", "params": {"seconds": 0.2}},
            "sum": {
                "type": "python",
                "params": {"function": "tests.support.sideeffects:add", "kwargs": {"a": "${inputs.n}", "b": 40}},
            },
            "flaky": {
                "type": "fail",
                "params": {"fail_attempts": 1},
                "retry": {"max_attempts": 2, "interval_seconds": 0.05},
            },
        },
        "outputs": ["greeting", "shape", "post", "nap", "sum", "flaky"],
    }
    run_id = client.enqueue(flow, inputs={"who": "Ada"}, events="live")  # every attempt's events
    result = client.result(run_id)
    assert result["greeting"] == "Hi Ada"
    assert result["shape"] == {"who": "Ada", "n": 2}
    assert result["post"]["status"] == 200
    assert result["post"]["body"] == {"path": "/flaky", "got": {"who": "Ada", "n": 2}}
    assert result["nap"] == {"slept_seconds": 0.2}
    assert result["sum"] == 42
    assert result["flaky"] == {"succeeded_on_attempt": 2}
    events = list(client.events(run_id))
    post_attempts = [e["attempt"] for e in events if e["event"] == "node.started" and e["node"] == "post"]
    assert post_attempts == [1, 2, 3]  # two 503s retried, the third answered
    assert events[0]["event"] == "run.started"
    assert events[-1]["event"] == "run.finished"
    assert all(e["duration_ms"] >= 0 for e in events if e["event"] == "node.finished")


def test_should_end_in_error_with_the_node_message_when_a_node_keeps_failing(
    client: FireflowClient, start_worker: StartWorker
) -> None:
    start_worker()
    run_id = client.enqueue(flows.failing_flow())
    with pytest.raises(Exception, match="node 'boom' failed: no luck"):
        client.result(run_id)
    status = client.status(run_id)
    assert status.status == "ERROR"
    events = list(client.events(run_id))
    assert [e["event"] for e in events] == ["run.started", "node.started", "node.failed", "run.failed"]


def test_should_run_independent_branches_concurrently(client: FireflowClient, start_worker: StartWorker) -> None:
    start_worker()
    flow = {
        "name": "fan-out",
        "nodes": {f"b{i}": {"type": "sleep", "params": {"seconds": 1.5}} for i in range(4)}
        | {"join": {"type": "template", "params": {"template": "done"}, "after": ["b0", "b1", "b2", "b3"]}},
    }
    run_id = client.enqueue(flow)
    assert client.result(run_id) == {"join": "done"}
    events = list(client.events(run_id))
    starts = {e["node"]: e["at_ms"] for e in events if e["event"] == "node.started"}
    finishes = {e["node"]: e["at_ms"] for e in events if e["event"] == "node.finished"}
    # Every branch started before any branch's sleep could have ended: they overlapped.
    assert max(starts[f"b{i}"] for i in range(4)) < min(finishes[f"b{i}"] for i in range(4)) + 1500


def test_should_reject_an_invalid_flow_and_enqueue_nothing(client: FireflowClient, migrated_url: str) -> None:
    bad = {
        "name": "bad",
        "nodes": {"a": {"type": "nope"}, "b": {"type": "template", "params": {"template": "${nodes.zz}"}}},
    }
    with pytest.raises(FlowValidationError) as caught:
        client.enqueue(bad)
    message = str(caught.value)
    assert "nope" in message
    assert "zz" in message
    with pytest.raises(FlowValidationError, match="who"):
        client.enqueue(flows.greet_flow(), inputs={})  # a required input is missing
    with pytest.raises(FlowValidationError, match="no stored flow named 'missing'"):
        client.enqueue(flow_ref="missing")
    assert _count_runs(migrated_url) == 0


def test_should_notify_ff_workflow_terminal_when_runs_succeed_and_fail(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str
) -> None:
    listener = psycopg.connect(migrated_url, autocommit=True)
    listener.execute("LISTEN ff_workflow_terminal")
    start_worker()
    ok = client.enqueue(flows.greet_flow(), inputs={"who": "x"})
    bad = client.enqueue(flows.failing_flow())
    received: dict[str, str] = {}
    for notify in listener.notifies(timeout=60):
        payload = json.loads(notify.payload)
        received[payload["workflow_id"]] = payload["status"]
        if len(received) == 2:
            break
    listener.close()
    assert received == {ok: "SUCCESS", bad: "ERROR"}


def test_should_count_in_metrics_what_actually_ran(client: FireflowClient, start_worker: StartWorker) -> None:
    worker = start_worker()
    assert worker.get("/healthz") == (200, "ok\n")
    oks = [client.enqueue(flows.greet_flow(), inputs={"who": str(i)}) for i in range(3)]
    bad = client.enqueue(flows.failing_flow())
    for run_id in oks:
        client.result(run_id)
    with pytest.raises(Exception, match="no luck"):
        client.result(bad)
    queue = '{queue="fireflow-executions"}'
    assert worker.metric("fireflow_runs_started_total", queue) == 4
    assert worker.metric("fireflow_runs_succeeded_total", queue) == 3
    assert worker.metric("fireflow_runs_failed_total", queue) == 1
    assert worker.metric("fireflow_node_duration_seconds_count", '{outcome="succeeded",type="template"}') == 3
    assert worker.metric("fireflow_run_duration_seconds_count", '{flow="greet"}') == 3
    assert worker.metric("fireflow_run_duration_seconds_count", '{flow="doomed"}') == 1
    assert worker.metric("fireflow_active_runs") == 0
    assert worker.metric("fireflow_worker_ready") == 1
    # The sampler reads queue depths and claim latencies every few seconds (off the runs' hot path); an idle
    # queue reads zero once sampled.
    deadline = time.monotonic() + 30
    while 'fireflow_queue_depth{queue="fireflow-executions",status="ENQUEUED"}' not in worker.get("/metrics")[1]:
        assert time.monotonic() < deadline, "queue depth never sampled"
        time.sleep(0.2)
    while worker.metric("fireflow_claim_latency_seconds_count", queue) < 4:
        assert time.monotonic() < deadline, "claim latencies never sampled"
        time.sleep(0.2)
    assert worker.metric("fireflow_claim_latency_seconds_count", queue) == 4
    assert worker.metric("fireflow_queue_depth", '{queue="fireflow-executions",status="ENQUEUED"}') == 0


def test_should_hit_the_provision_cache_inside_the_ttl_and_miss_after_it(
    client: FireflowClient, start_worker: StartWorker
) -> None:
    worker = start_worker(FIREFLOW_PROVISION_CACHE_TTL_MS="3000")

    def stored(text: str) -> dict[str, Any]:
        return {"name": "stored", "nodes": {"say": {"type": "template", "params": {"template": text}}}}

    client.save_flow("stored", stored("v1"))
    assert client.result(client.enqueue(flow_ref="stored")) == {"say": "v1"}  # miss: loaded
    client.save_flow("stored", stored("v2"))
    assert client.result(client.enqueue(flow_ref="stored")) == {"say": "v1"}  # hit: still the cached v1
    assert worker.metric("fireflow_provision_cache_lookups_total", '{result="hit"}') == 1
    time.sleep(3.2)  # let the entry expire (the TTL is the behaviour under test)
    assert client.result(client.enqueue(flow_ref="stored")) == {"say": "v2"}  # miss: reloaded
    assert worker.metric("fireflow_provision_cache_lookups_total", '{result="miss"}') == 2


def test_should_load_every_stored_flow_when_the_cache_is_off(client: FireflowClient, start_worker: StartWorker) -> None:
    worker = start_worker(FIREFLOW_PROVISION_CACHE_TTL_MS="0")
    client.save_flow("stored", {"name": "stored", "nodes": {"say": {"type": "template", "params": {"template": "a"}}}})
    client.result(client.enqueue(flow_ref="stored"))
    client.save_flow("stored", {"name": "stored", "nodes": {"say": {"type": "template", "params": {"template": "b"}}}})
    assert client.result(client.enqueue(flow_ref="stored")) == {"say": "b"}
    assert worker.metric("fireflow_provision_cache_lookups_total", '{result="hit"}') == 0


def test_should_serve_only_the_configured_queues(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str
) -> None:
    start_worker(FIREFLOW_QUEUES="fireflow-sandbox")
    served = client.enqueue(flows.greet_flow(), inputs={"who": "s"}, queue="fireflow-sandbox")
    ignored = client.enqueue(flows.greet_flow(), inputs={"who": "e"}, queue="fireflow-executions")
    assert client.result(served) == {"hello": "Hello s"}
    time.sleep(0.5)
    assert client.status(ignored).status == "ENQUEUED"
