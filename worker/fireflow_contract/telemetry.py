"""Traces and logs over OTLP: a span per run and per node attempt (the worker), per reconcile (the operator),
and every log record beside stderr when `OTEL_LOGS_EXPORTER=otlp` asks for it.

On only when the standard variables ask for it: `OTEL_EXPORTER_OTLP_ENDPOINT` (or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) set, `OTEL_SDK_DISABLED` not true, `OTEL_TRACES_EXPORTER` not `none`.
Everything else is the OpenTelemetry SDK's own reading of the `OTEL_*` variables: `OTEL_SERVICE_NAME`
(default: the process's, `fireflow-worker` or `fireflow-operator`), `OTEL_RESOURCE_ATTRIBUTES`,
`OTEL_EXPORTER_OTLP_HEADERS`/`_TIMEOUT`/`_COMPRESSION`/`_CERTIFICATE`, `OTEL_TRACES_SAMPLER[_ARG]` and
`OTEL_BSP_*`. The protocol is OTLP/HTTP with protobuf (`<endpoint>/v1/traces`); `grpc` is refused at start.

DBOS 3.4 could make spans itself (`enable_otlp`), but its step span covers every attempt of a step and
carries none of the flow's names, and its exporter takes `service.name` from the DBOS application name and
its endpoint from its own settings, not from the `OTEL_*` variables; the worker's spans replace it.

Log records go to the OTLP receiver (`<endpoint>/v1/logs`, OTLP/HTTP with protobuf) only when
`OTEL_LOGS_EXPORTER=otlp` is set beside the endpoint (or `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`): the cluster's log
agent collects stderr already, and sending each line twice is a choice. A record carries the trace and span ids
of the span active where it was written (a run's, a node's, a reconcile's), the fields of its JSON line as
attributes (`k8s.namespace.name`, `fireflow.pool`, `fireflow.executor`, `fireflow.run.id`, `fireflow.node.id`,
`k8s.object`) and the process's span attributes; the OpenTelemetry SDK's own lines are kept off it (an export
failure would otherwise be exported, and fail again). `OTEL_BLRP_*` tune the batching.

A run continues the trace its enqueuer started: the run request's optional `traceparent` (and `tracestate`)
keys, W3C Trace Context (run_request.py and docs/run-contract.md). A run recovered after a crash starts a new run
span in the same trace (the request is the run's recorded input).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from fireflow_contract import logformat
from fireflow_contract.run_request import TRACEPARENT, TRACESTATE

log = logging.getLogger("fireflow.telemetry")

TRACER_NAME = "fireflow"

_PROVIDER: Any = None
_LOG_PROVIDER: Any = None
# Attributes of every span of this process (its executor id, its application version).
_PROCESS_ATTRIBUTES: dict[str, str] = {}


class TelemetryError(Exception):
    """The OTEL_* variables ask for something this build cannot do; one line naming the fix."""


def tracing_requested(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def configure_tracing(
    default_service_name: str, attributes: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None
) -> bool:
    """Install the OTLP/HTTP exporter when the environment asks for traces; returns whether it did.
    `attributes` go on every span of the process."""
    global _PROVIDER  # noqa: PLW0603 - one tracer provider per process, as OpenTelemetry's own global
    env = os.environ if environ is None else environ
    if not tracing_requested(env):
        return False
    _PROCESS_ATTRIBUTES.update(attributes or {})
    _check_protocol("traces", env)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415

    provider = TracerProvider(resource=_resource(default_service_name, env))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _PROVIDER = provider
    return True


def _check_protocol(signal: str, env: Mapping[str, str]) -> None:
    variable = f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL"
    protocol = env.get(variable) or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    if protocol.strip() != "http/protobuf":
        raise TelemetryError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported: {signal} are exported over OTLP/HTTP; "
            "set it to http/protobuf (or leave it unset) and point OTEL_EXPORTER_OTLP_ENDPOINT at the "
            "receiver's HTTP port (usually 4318)"
        )


def _resource(default_service_name: str, env: Mapping[str, str]) -> Any:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource  # noqa: PLC0415

    # An explicit attribute would win over OTEL_SERVICE_NAME: give the default only when it is unset.
    named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    return Resource.create({} if named else {SERVICE_NAME: default_service_name})


def logs_requested(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_LOGS_EXPORTER", "").strip().lower() != "otlp":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"))


def configure_log_export(
    default_service_name: str,
    attributes: Mapping[str, str] | None = None,
    filters: Sequence[logging.Filter] = (),
    environ: Mapping[str, str] | None = None,
) -> bool:
    """Send every log record of the process to the OTLP receiver too, when the environment asks for it; returns
    whether it does. Call it after `logformat.configure` (which replaces the root logger's handlers); `filters`
    go on the new handler first (the database password's mask)."""
    global _LOG_PROVIDER  # noqa: PLW0603 - one logger provider per process, as OpenTelemetry's own global
    env = os.environ if environ is None else environ
    if not logs_requested(env):
        return False
    _check_protocol("logs", env)
    from opentelemetry._logs import set_logger_provider  # noqa: PLC0415
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter  # noqa: PLC0415
    from opentelemetry.sdk._logs import LoggerProvider  # noqa: PLC0415
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor  # noqa: PLC0415

    provider = LoggerProvider(resource=_resource(default_service_name, env))
    provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
    set_logger_provider(provider)
    _LOG_PROVIDER = provider
    handler = OtlpLogHandler(provider, {**_PROCESS_ATTRIBUTES, **(attributes or {})})
    for each in filters:
        handler.addFilter(each)
    logging.getLogger().addHandler(handler)
    for name in logformat.OWN_HANDLER_LOGGERS:
        if not logging.getLogger(name).propagate:  # made so by logformat.configure (the worker's, not the operator's)
            logging.getLogger(name).addHandler(handler)
    return True


_SUPPRESSED = otel_context._SUPPRESS_INSTRUMENTATION_KEY  # set by the SDK around its exports
# logformat's context fields -> the attribute names of an exported record
_LOG_ATTRIBUTES = {
    "namespace": "k8s.namespace.name", "pool": "fireflow.pool", "executor": "fireflow.executor",
    "run_id": "fireflow.run.id", "node": "fireflow.node.id", "object": "k8s.object",
}  # fmt: skip


class OtlpLogHandler(logging.Handler):
    """Each record as an OpenTelemetry log record, in the context (the span) it was written in."""

    def __init__(self, provider: Any, attributes: Mapping[str, str]) -> None:
        super().__init__()
        self._provider = provider
        self._attributes = dict(attributes)

    def emit(self, record: logging.LogRecord) -> None:
        # The SDK's own lines, and those written while it exports (urllib3's at debug level), stay on stderr:
        # exported, each would cause the next.
        if record.name.startswith("opentelemetry") or otel_context.get_value(_SUPPRESSED):
            return
        try:
            self._provider.get_logger(record.name).emit(self.translate(record))
        except Exception:
            self.handleError(record)

    def translate(self, record: logging.LogRecord) -> Any:
        from opentelemetry._logs import LogRecord, SeverityNumber  # noqa: PLC0415

        context = logformat.record_context(record)
        attributes: dict[str, str | int] = {
            **self._attributes,
            **{_LOG_ATTRIBUTES[key]: str(value) for key, value in context.items() if key in _LOG_ATTRIBUTES},
            "logger.name": record.name,
        }
        if record.exc_info and record.exc_info[0] is not None:
            attributes["exception.type"] = record.exc_info[0].__name__
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            attributes["exception.stacktrace"] = record.exc_text  # as masked, when a mask ran before
        level = {"WARNING": "WARN", "CRITICAL": "FATAL"}.get(record.levelname, record.levelname)
        return LogRecord(
            timestamp=int(record.created * 1e9),
            observed_timestamp=time.time_ns(),
            context=otel_context.get_current(),
            severity_text=level,
            severity_number=SeverityNumber.__members__.get(level, SeverityNumber.UNSPECIFIED),
            body=record.getMessage(),
            attributes=attributes,
        )


def flush(timeout_millis: int = 5_000) -> None:
    """Export what is buffered (before the process exits without running atexit handlers)."""
    for provider in (_PROVIDER, _LOG_PROVIDER):
        if provider is not None:
            provider.force_flush(timeout_millis)


def shutdown() -> None:
    for provider in (_PROVIDER, _LOG_PROVIDER):
        if provider is not None:
            provider.shutdown()


def _tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


def enabled() -> bool:
    return _PROVIDER is not None


def parent_of(request: Any) -> otel_context.Context | None:
    """The enqueuer's trace context in a run request; None when it has none (or a malformed one)."""
    if not isinstance(request, dict) or not isinstance(request.get(TRACEPARENT), str):
        return None
    carrier = {TRACEPARENT: request[TRACEPARENT]}
    if isinstance(request.get(TRACESTATE), str):
        carrier[TRACESTATE] = request[TRACESTATE]
    extracted = TraceContextTextMapPropagator().extract(carrier)
    return extracted if trace.get_current_span(extracted).get_span_context().is_valid else None


def current_traceparent() -> dict[str, str]:
    """The active span's context as run request keys, for an enqueuer inside a trace (empty outside one)."""
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return {key: carrier[key] for key in (TRACEPARENT, TRACESTATE) if key in carrier}


@dataclass(frozen=True)
class RunTrace:
    """What a run's node spans need: their parent (the run span) and the run's attributes."""

    context: otel_context.Context | None = None
    attributes: dict[str, str] = field(default_factory=dict)


NO_TRACE = RunTrace()


_current_run: contextvars.ContextVar[RunTrace] = contextvars.ContextVar("fireflow_run_trace", default=NO_TRACE)


def current_run() -> RunTrace:
    """The run span of the run executing in this context (its nodes' steps are started from it)."""
    return _current_run.get()


# Without tracing, a run and its nodes enter these (reusable: a null context keeps no state).
_NO_RUN_SPAN = contextlib.nullcontext(NO_TRACE)
_NO_NODE_SPAN: contextlib.nullcontext[Span | None] = contextlib.nullcontext(None)


def run_span(request: Any, run_id: str, flow: str, queue: str) -> AbstractContextManager[RunTrace]:
    """The span of one run, current inside the block; an exception leaving it marks it failed."""
    if not enabled():
        return _NO_RUN_SPAN
    return _run_span(request, {"fireflow.run.id": run_id, "fireflow.flow": flow, "fireflow.queue": queue})


@contextlib.contextmanager
def _run_span(request: Any, attributes: dict[str, str]) -> Iterator[RunTrace]:
    every = {**_PROCESS_ATTRIBUTES, **attributes}
    with _tracer().start_as_current_span(
        f"run {attributes.get('fireflow.flow', '')}".strip(),
        context=parent_of(request),
        kind=SpanKind.CONSUMER,
        attributes=every,
    ):
        run = RunTrace(otel_context.get_current(), every)
        token = _current_run.set(run)
        try:
            yield run
        finally:
            _current_run.reset(token)


def node_span(run: RunTrace, node_id: str, node_type: str, attempt: int) -> AbstractContextManager[Span | None]:
    """The span of one attempt of a node, a child of its run's span."""
    if not enabled() or run.context is None:
        return _NO_NODE_SPAN
    return _node_span(run, node_id, node_type, attempt)


@contextlib.contextmanager
def _node_span(run: RunTrace, node_id: str, node_type: str, attempt: int) -> Iterator[Span | None]:
    attributes: dict[str, str | int] = {
        **run.attributes,
        "fireflow.node.id": node_id,
        "fireflow.node.type": node_type,
        "fireflow.node.attempt": attempt,
    }
    with _tracer().start_as_current_span(f"node {node_id}", context=run.context, attributes=attributes) as span:
        yield span


@contextlib.contextmanager
def span(name: str, attributes: dict[str, str]) -> Iterator[Span | None]:
    """A span of the operator's (a reconcile), always a root: a reconcile scheduled from another inherits its
    context, and is not a part of it."""
    if not enabled():
        yield None
        return
    with _tracer().start_as_current_span(
        name, context=otel_context.Context(), attributes={**_PROCESS_ATTRIBUTES, **attributes}
    ) as current:
        yield current


def record_failure(err: BaseException) -> None:
    """Mark the current span failed by `err`, which its code caught (the operator logs and retries)."""
    current = trace.get_current_span()
    if current.is_recording():
        current.record_exception(err)
        current.set_status(Status(StatusCode.ERROR, f"{type(err).__name__}: {err}"[:500]))
