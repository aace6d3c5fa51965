"""Traces of a real worker, received by a real OpenTelemetry Collector over OTLP/HTTP: a span per run and
per node attempt with the run's attributes, the run continuing the enqueuer's trace (the request's
`traceparent`), the nodes children of their run, a failed node's and run's spans in error."""

from __future__ import annotations

from collections.abc import Callable

from fireflow_worker.client import FireflowClient
from tests.support.otlp import Collector, Span
from tests.support.proc import WorkerProcess
from tests.worker.test_logs import three_nodes

StartWorker = Callable[..., WorkerProcess]
ENQUEUER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
ENQUEUER_SPAN = "00f067aa0ba902b7"


def _traced_worker(start_worker: StartWorker, collector: Collector, *, wait: bool = True, **env: str) -> WorkerProcess:
    return start_worker(
        "traced-a",
        wait=wait,
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
        OTEL_SERVICE_NAME="fireflow-worker-under-test",
        OTEL_BSP_SCHEDULE_DELAY="100",
        FIREFLOW_APPLICATION_VERSION="7",
        **env,
    )


def _run_span(spans: list[Span], run_id: str) -> Span:
    (run,) = [s for s in spans if s.name.startswith("run ") and s.attributes.get("fireflow.run.id") == run_id]
    return run


def test_should_export_a_span_per_run_and_node_continuing_the_enqueuers_trace(
    start_worker: StartWorker, client: FireflowClient, otlp_collector: Collector
) -> None:
    worker = _traced_worker(start_worker, otlp_collector)
    traceparent = f"00-{ENQUEUER_TRACE}-{ENQUEUER_SPAN}-01"
    ok = client.enqueue(three_nodes(), traceparent=traceparent)
    failed = client.enqueue(three_nodes(fail_last=True))
    assert client.wait(ok, timeout_seconds=60).status == "SUCCESS"
    assert client.wait(failed, timeout_seconds=60).status == "ERROR"
    spans = otlp_collector.wait_for(8)  # 2 runs x (1 run + 3 nodes)
    worker.terminate()
    assert worker.wait_exit() == 0
    assert {s.service for s in spans} == {"fireflow-worker-under-test"}

    run = _run_span(spans, ok)
    assert (run.trace_id, run.parent_span_id) == (ENQUEUER_TRACE, ENQUEUER_SPAN)
    assert run.name == "run three"
    assert run.attributes == {
        "fireflow.run.id": ok,
        "fireflow.flow": "three",
        "fireflow.queue": "fireflow-executions",
        "fireflow.executor": "traced-a",
        "fireflow.application_version": "7",
    }
    assert run.status_code != 2
    nodes = {s.attributes["fireflow.node.id"]: s for s in spans if s.parent_span_id == run.span_id}
    assert set(nodes) == {"a", "b", "c"}
    for node_id, node in nodes.items():
        assert node.trace_id == ENQUEUER_TRACE
        assert node.name == f"node {node_id}"
        assert node.attributes["fireflow.run.id"] == ok
        assert node.attributes["fireflow.node.type"] == "template"
        assert node.attributes["fireflow.node.attempt"] == 1
        assert node.attributes["fireflow.executor"] == "traced-a"
        assert node.attributes["fireflow.application_version"] == "7"
        assert node.status_code != 2

    failed_run = _run_span(spans, failed)
    assert failed_run.parent_span_id == ""  # no trace to continue: a trace of its own
    assert failed_run.trace_id != ENQUEUER_TRACE
    assert failed_run.status_code == 2
    failed_nodes = {s.attributes["fireflow.node.id"]: s for s in spans if s.parent_span_id == failed_run.span_id}
    assert failed_nodes["c"].status_code == 2
    assert "no luck" in failed_nodes["c"].status_message
    assert failed_nodes["a"].status_code != 2


def test_should_refuse_otlp_over_grpc_in_one_line(start_worker: StartWorker, otlp_collector: Collector) -> None:
    worker = _traced_worker(start_worker, otlp_collector, wait=False, OTEL_EXPORTER_OTLP_PROTOCOL="grpc")
    assert worker.wait_exit() == 2
    assert "OTEL_EXPORTER_OTLP_PROTOCOL='grpc' is not supported" in worker.output()


def test_should_export_the_log_over_otlp_in_the_runs_span_with_otlp_logs(
    start_worker: StartWorker, client: FireflowClient, otlp_collector: Collector
) -> None:
    worker = _traced_worker(
        start_worker, otlp_collector, OTEL_LOGS_EXPORTER="otlp", OTEL_BLRP_SCHEDULE_DELAY="100", DBOS_LOG_LEVEL="debug"
    )  # a run's own lines are debug
    run_id = client.enqueue(three_nodes(), traceparent=f"00-{ENQUEUER_TRACE}-{ENQUEUER_SPAN}-01")
    assert client.wait(run_id, timeout_seconds=60).status == "SUCCESS"
    spans = otlp_collector.wait_for(4)
    records = otlp_collector.wait_for_logs(lambda found: any(r.body.startswith(f"run {run_id} ended") for r in found))
    worker.terminate()
    assert worker.wait_exit() == 0
    run = _run_span(spans, run_id)

    started = [r for r in records if r.body.startswith(f"run {run_id} started")]
    assert len(started) == 1
    (line,) = started
    assert (line.trace_id, line.span_id) == (ENQUEUER_TRACE, run.span_id)
    assert (line.service, line.logger, line.severity) == ("fireflow-worker-under-test", "fireflow.worker", "DEBUG")
    assert line.attributes["fireflow.run.id"] == run_id
    assert line.attributes["fireflow.executor"] == "traced-a"
    assert line.attributes["fireflow.application_version"] == "7"
    ready = [r for r in records if r.body.startswith("ready: executor traced-a")]
    assert ready and ready[0].trace_id == ""  # written outside every span
    assert any(r.logger.startswith("dbos") for r in records)  # DBOS's lines too
    assert f"run {run_id} started" in worker.output()  # and stderr still has every line


def test_should_export_no_log_without_otlp_logs(
    start_worker: StartWorker, client: FireflowClient, otlp_collector: Collector
) -> None:
    worker = _traced_worker(start_worker, otlp_collector)
    run_id = client.enqueue(three_nodes())
    assert client.wait(run_id, timeout_seconds=60).status == "SUCCESS"
    otlp_collector.wait_for(4)
    worker.terminate()
    assert worker.wait_exit() == 0
    assert otlp_collector.logs() == []


def test_should_export_a_supervisors_log_and_its_processes_with_otlp_logs(
    start_worker: StartWorker, otlp_collector: Collector
) -> None:
    worker = start_worker(
        "pool-0",
        FIREFLOW_WORKER_PROCESSES="2",
        OTEL_EXPORTER_OTLP_ENDPOINT=otlp_collector.endpoint,
        OTEL_LOGS_EXPORTER="otlp",
        OTEL_BLRP_SCHEDULE_DELAY="100",
    )
    worker.terminate()
    assert worker.wait_exit() == 0
    records = otlp_collector.wait_for_logs(
        lambda found: any(r.logger == "fireflow.supervisor" and r.body == "stopped (status 0)" for r in found)
    )
    assert any(r.body.startswith("supervising 2 worker processes") for r in records)
    ready = {r.attributes.get("fireflow.executor") for r in records if r.body.startswith("ready: executor")}
    assert ready == {"pool-0", "pool-0-p1"}
    assert {r.service for r in records} == {"fireflow-worker"}
