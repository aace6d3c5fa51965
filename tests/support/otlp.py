"""A real OTLP receiver for the tracing tests, the fixture `otlp_collector` (a plugin of tests/conftest.py):
the OpenTelemetry Collector (built from Go modules by tests/kube/build-otel-collector.sh) with its OTLP
receiver, writing every span and log record it receives to a file as OTLP JSON through the contrib file
exporter. `spans()` and `logs()` read them back, flattened."""

from __future__ import annotations

import json
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fireflow_local.ports import free_port
from tests.kube.tools import otelcol_path

CONFIG = """
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{port}
exporters:
  file:
    path: {path}
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
    logs:
      receivers: [otlp]
      exporters: [file]
"""


@dataclass(frozen=True)
class Span:
    service: str
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    attributes: dict[str, Any]
    status_code: int  # 0 unset, 1 ok, 2 error
    status_message: str


@dataclass(frozen=True)
class LogRecord:
    service: str
    logger: str  # the instrumentation scope: the Python logger's name
    severity: str
    body: str
    trace_id: str  # "" outside a span
    span_id: str
    attributes: dict[str, Any]


def _value(value: dict[str, Any]) -> Any:
    for kind in ("stringValue", "boolValue", "doubleValue"):
        if kind in value:
            return value[kind]
    if "intValue" in value:
        return int(value["intValue"])
    return value


def _attributes(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {item["key"]: _value(item.get("value", {})) for item in items}


class Collector:
    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.output = workdir / "spans.jsonl"
        self.log_path = workdir / "collector.log"
        config = workdir / "collector.yaml"
        config.write_text(CONFIG.format(port=self.port, path=self.output))
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [str(otelcol_path()), "--config", str(config)], stdout=log, stderr=subprocess.STDOUT
            )
        self._wait_listening()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _wait_listening(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the collector exited:\n{self.log_path.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"the collector is not listening:\n{self.log_path.read_text()}")

    def _lines(self) -> list[str]:
        """The file's complete lines: the collector may be writing the last one while it is read."""
        if not self.output.exists():
            return []
        text = self.output.read_text()
        return [line for line in text[: text.rfind("\n") + 1].splitlines() if line.strip()]

    def spans(self) -> list[Span]:
        found = []
        for line in self._lines():
            for resource_spans in json.loads(line).get("resourceSpans", []):
                resource = _attributes(resource_spans.get("resource", {}).get("attributes", []))
                for scope_spans in resource_spans.get("scopeSpans", []):
                    for span in scope_spans.get("spans", []):
                        status = span.get("status", {})
                        found.append(
                            Span(
                                service=str(resource.get("service.name")),
                                trace_id=span["traceId"],
                                span_id=span["spanId"],
                                parent_span_id=span.get("parentSpanId", ""),
                                name=span["name"],
                                attributes=_attributes(span.get("attributes", [])),
                                status_code=int(status.get("code", 0)),
                                status_message=status.get("message", ""),
                            )
                        )
        return found

    def logs(self) -> list[LogRecord]:
        found = []
        for line in self._lines():
            for resource_logs in json.loads(line).get("resourceLogs", []):
                resource = _attributes(resource_logs.get("resource", {}).get("attributes", []))
                for scope_logs in resource_logs.get("scopeLogs", []):
                    for record in scope_logs.get("logRecords", []):
                        found.append(
                            LogRecord(
                                service=str(resource.get("service.name")),
                                logger=scope_logs.get("scope", {}).get("name", ""),
                                severity=record.get("severityText", ""),
                                body=str(_value(record.get("body", {}))),
                                trace_id=record.get("traceId", ""),
                                span_id=record.get("spanId", ""),
                                attributes=_attributes(record.get("attributes", [])),
                            )
                        )
        return found

    def wait_for_logs(self, predicate: Callable[[list[LogRecord]], bool], timeout: float = 60) -> list[LogRecord]:
        """The log records once `predicate` holds for them."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            records = self.logs()
            if predicate(records):
                return records
            time.sleep(0.2)
        raise AssertionError(f"{len(self.logs())} log records arrived, not the expected:\n{self.log_path.read_text()}")

    def wait_for(self, count: int, timeout: float = 60) -> list[Span]:
        """The spans once at least `count` arrived."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            spans = self.spans()
            if len(spans) >= count:
                return spans
            time.sleep(0.2)
        raise AssertionError(f"{len(self.spans())} spans arrived, not {count}:\n{self.log_path.read_text()}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def otlp_collector() -> Iterator[Collector]:
    with tempfile.TemporaryDirectory(prefix="fireflow-otelcol-") as workdir:
        collector = Collector(Path(workdir))
        yield collector
        collector.stop()
