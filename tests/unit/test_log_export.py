"""The OTLP log handler (fireflow_contract.telemetry) without a receiver: what a record becomes (severity, body,
the span it was written in, the JSON line's fields as attributes, the masked traceback), and which records it
keeps off the export. The real receiver: tests/worker/test_traces.py, tests/operator/test_traces.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from fireflow_contract import logformat, telemetry
from fireflow_contract.dburl import SecretMask

URL = "postgresql://fireflow:hunter2-secret@db:5432/fireflow"
TRACE_ID, SPAN_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7


@pytest.fixture
def exported() -> Iterator[tuple[logging.Logger, InMemoryLogRecordExporter]]:
    memory = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    handler = telemetry.OtlpLogHandler(provider, {"fireflow.application_version": "7"})
    handler.addFilter(SecretMask([URL]))
    logger = logging.getLogger("fireflow.test-export")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield logger, memory
    logger.removeHandler(handler)
    provider.shutdown()


def _records(memory: InMemoryLogRecordExporter) -> list[ReadableLogRecord]:
    return list(memory.get_finished_logs())


def test_should_export_a_record_in_its_span_with_what_it_is_about(
    exported: tuple[logging.Logger, InMemoryLogRecordExporter],
) -> None:
    logger, memory = exported
    span = NonRecordingSpan(SpanContext(TRACE_ID, SPAN_ID, is_remote=False, trace_flags=TraceFlags(1)))
    with trace.use_span(span), logformat.run_context("run-1"), logformat.node_context("b"):
        logger.warning("node %s retried", "b")
    logger.info("outside")
    inside, outside = (r.log_record for r in _records(memory))
    assert (inside.body, inside.severity_text, inside.severity_number.name if inside.severity_number else None) == (
        "node b retried", "WARN", "WARN"
    )  # fmt: skip
    assert (inside.trace_id, inside.span_id) == (TRACE_ID, SPAN_ID)
    assert dict(inside.attributes or {}) == {
        "fireflow.application_version": "7",
        "fireflow.run.id": "run-1",
        "fireflow.node.id": "b",
        "logger.name": "fireflow.test-export",
    }
    assert (outside.body, outside.severity_text) == ("outside", "INFO")
    assert not outside.trace_id


def test_should_export_the_masked_traceback(exported: tuple[logging.Logger, InMemoryLogRecordExporter]) -> None:
    logger, memory = exported
    try:
        raise RuntimeError(f"cannot connect to {URL}")
    except RuntimeError:
        logger.exception("failed with %s", URL)
    (record,) = (r.log_record for r in _records(memory))
    attributes = dict(record.attributes or {})
    assert "hunter2-secret" not in str(record.body) + str(attributes)
    assert attributes["exception.type"] == "RuntimeError"
    assert "RuntimeError: cannot connect to" in str(attributes["exception.stacktrace"])
    assert record.severity_text == "ERROR"


def test_should_keep_the_sdks_own_lines_and_those_of_its_exports_off_the_export(
    exported: tuple[logging.Logger, InMemoryLogRecordExporter],
) -> None:
    logger, memory = exported
    sdk = logging.getLogger("opentelemetry.exporter.otlp.proto.http._log_exporter")
    for handler in logger.handlers:
        sdk.addHandler(handler)
    try:
        sdk.warning("Failed to export logs batch")
        token = otel_context.attach(otel_context.set_value(telemetry._SUPPRESSED, True))
        try:
            logger.debug("Starting new HTTP connection (1): collector:4318")  # as urllib3 logs inside an export
        finally:
            otel_context.detach(token)
    finally:
        for handler in logger.handlers:
            sdk.removeHandler(handler)
    assert _records(memory) == []


def test_should_ask_for_log_export_only_with_otlp_logs_and_an_endpoint() -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    assert telemetry.logs_requested({**endpoint, "OTEL_LOGS_EXPORTER": "otlp"})
    assert telemetry.logs_requested(
        {"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://c:4318/v1/logs", "OTEL_LOGS_EXPORTER": "otlp"}
    )
    assert not telemetry.logs_requested(endpoint)  # traces only, as before
    assert not telemetry.logs_requested({"OTEL_LOGS_EXPORTER": "otlp"})
    assert not telemetry.logs_requested({**endpoint, "OTEL_LOGS_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"})
    with pytest.raises(telemetry.TelemetryError, match="logs are exported over OTLP/HTTP"):
        telemetry.configure_log_export(
            "x", environ={**endpoint, "OTEL_LOGS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "grpc"}
        )
