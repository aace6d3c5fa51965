"""One log format for every line a fireflow process writes: the worker's, its supervisor's, the operator's,
and those of the libraries inside them (DBOS, kopf, the Kubernetes client, SQLAlchemy).

`FIREFLOW_LOG_FORMAT=text` (the default) writes `time level logger: [namespace/pool] message key=value...`;
`json` writes one JSON object per line with `time`, `level`, `logger`, `message` and, where known, what the
line is about: `namespace`, `pool`, `executor`, `run_id`, `node`, `object` (a Kubernetes object other than
the pool), `trace_id`/`span_id` (the active OpenTelemetry span) and `exception` (a traceback, one string).

The context comes from three places: fixed fields of the process (`set_process_context`: the executor id,
the pod's namespace), context variables set around a run, a node or a reconcile (`run_context`,
`node_context`, `pool_context`; asyncio tasks and DBOS's step threads inherit them), and what a library put
on its record (kopf's object reference, DBOS's workflow id).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any, Final, Literal, TextIO

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
LOG_FORMAT_ENV: Final = "FIREFLOW_LOG_FORMAT"
# The context fields, in the order they are written.
CONTEXT_FIELDS = ("namespace", "pool", "executor", "run_id", "node", "object", "trace_id", "span_id")

_run_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("fireflow_run_id", default=None)
_node: contextvars.ContextVar[str | None] = contextvars.ContextVar("fireflow_node", default=None)
_pool: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("fireflow_pool", default=None)
_process_context: dict[str, str] = {}
# Loggers that do not propagate to the root and write through the root's handler themselves (DBOS's).
OWN_HANDLER_LOGGERS = ("dbos",)


def log_format_from_env(environ: Mapping[str, str] | None = None) -> LogFormat:
    """The format the environment asks for; anything but `json` (any case) is text. A bad value is reported
    by the configuration's validation, in the format this returns."""
    value = (os.environ if environ is None else environ).get(LOG_FORMAT_ENV, "")
    return "json" if value.strip().lower() == "json" else "text"


def set_process_context(**fields: str | None) -> None:
    """Fields every line of this process carries (empty values are left out)."""
    _process_context.update({key: value for key, value in fields.items() if value})


class _About:
    """Lines written inside are about `value` (a context variable set, then reset). A class rather than a
    generator: a run enters several of these per node, and a generator's context manager costs four times
    as much."""

    __slots__ = ("_token", "_value", "_variable")

    def __init__(self, variable: contextvars.ContextVar[str | None], value: str) -> None:
        self._variable = variable
        self._value = value

    def __enter__(self) -> None:
        self._token = self._variable.set(self._value)

    def __exit__(self, *_exc: object) -> None:
        self._variable.reset(self._token)


def run_context(run_id: str) -> _About:
    return _About(_run_id, run_id)


def node_context(node_id: str) -> _About:
    return _About(_node, node_id)


def step_context(run_id: str, node_id: str) -> AbstractContextManager[None]:
    """Lines about this run's node: nothing to set where they already are (a step run in the workflow's own
    thread, DBOS's way with a sync step), both where they are not (a thread of DBOS's pool)."""
    if _run_id.get() == run_id and _node.get() == node_id:
        return _ALREADY
    return _Both(run_id, node_id)


class _Both:
    __slots__ = ("_node", "_run", "_tokens")

    def __init__(self, run_id: str, node_id: str) -> None:
        self._run, self._node = run_id, node_id

    def __enter__(self) -> None:
        self._tokens = (_run_id.set(self._run), _node.set(self._node))

    def __exit__(self, *_exc: object) -> None:
        _node.reset(self._tokens[1])
        _run_id.reset(self._tokens[0])


_ALREADY = contextlib.nullcontext()


def enter_pool(namespace: str, name: str) -> None:
    """What the current task's lines are about from now on: a pool (kopf logs a handler's outcome after the
    handler returned, in the same task, so a context manager would be gone by then)."""
    _pool.set((namespace, name))


def record_context(record: logging.LogRecord) -> dict[str, Any]:
    """What `record` is about, from the process, the context variables and the record's own attributes."""
    context: dict[str, Any] = dict(_process_context)
    pool = _pool.get()
    if pool is not None:
        context["namespace"], context["pool"] = pool
    ref = getattr(record, "k8s_ref", None)  # kopf's per-object loggers
    if isinstance(ref, Mapping):
        if ref.get("namespace"):
            context["namespace"] = ref["namespace"]
        if ref.get("kind") == "FireflowWorkerPool":
            context["pool"] = ref.get("name")
        elif ref.get("name"):
            context["object"] = f"{ref.get('kind') or 'object'}/{ref['name']}"
    run_id = _run_id.get() or getattr(record, "operationUUID", None)  # DBOS's workflow id
    if run_id:
        context["run_id"] = run_id
    node = _node.get()
    if node:
        context["node"] = node
    context.update(_span_ids())
    return {key: context[key] for key in CONTEXT_FIELDS if context.get(key)}


def _span_ids() -> dict[str, str]:
    """The active span's ids, when OpenTelemetry is installed and a span is recording."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return {}
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return {}
    return {"trace_id": f"{span_context.trace_id:032x}", "span_id": f"{span_context.span_id:016x}"}


def _timestamp(record: logging.LogRecord) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, a traceback included as one string."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **record_context(record),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = record.stack_info
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """`time level logger: [namespace/pool] message key=value...`, a traceback on the lines after it."""

    def format(self, record: logging.LogRecord) -> str:
        context = record_context(record)
        where = ""
        if "pool" in context:
            where = f"[{context.pop('namespace', '')}/{context.pop('pool')}] ".replace("[/", "[")
        context.pop("span_id", None)
        extra = "".join(f" {key}={value}" for key, value in context.items())
        text = f"{_timestamp(record)} {record.levelname} {record.name}: {where}{record.getMessage()}{extra}"
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            text = f"{text}\n{record.exc_text}"
        return text


class LineHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that formats a record before it takes its lock, which then covers the write alone: with
    fifty runs' threads logging, formatting under the lock made it the worker's most contended one."""

    def handle(self, record: logging.LogRecord) -> bool:
        if not self.filter(record):
            return False
        try:
            line = self.format(record) + self.terminator
        except Exception:  # logging's own rule: a record that cannot be formatted is reported, never raised
            self.handleError(record)
            return True
        with self.lock:  # type: ignore[union-attr]  # created by Handler.__init__
            try:
                self.stream.write(line)
                self.stream.flush()
            except Exception:
                self.handleError(record)
        return True


def formatter(log_format: LogFormat) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else TextFormatter()


def configure(level: str | int, log_format: LogFormat, stream: TextIO | None = None) -> logging.Handler:
    """Every record of the process through one handler on stderr: the root logger's, and DBOS's logger's
    (DBOS does not propagate and adds a console handler of its own only when its logger has none)."""
    handler = LineHandler(stream or sys.stderr)
    handler.setFormatter(formatter(log_format))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in OWN_HANDLER_LOGGERS:
        own = logging.getLogger(name)
        own.handlers[:] = [handler]
        own.propagate = False
    logging.captureWarnings(True)  # `warnings.warn` lines too, not printed raw
    return handler


def use_format(log_format: LogFormat) -> None:
    """Put this format on the handlers already installed (kopf's, after `kopf.configure`)."""
    for handler in logging.getLogger().handlers:
        handler.setFormatter(formatter(log_format))
    logging.captureWarnings(True)


def early_error(message: str, environ: Mapping[str, str] | None = None, level: int = logging.ERROR) -> None:
    """A line written before logging is set up (a bad setting), in the format the environment asks for."""
    if log_format_from_env(environ) == "json":
        record = logging.LogRecord("fireflow", level, __file__, 0, message, None, None)
        print(JsonFormatter().format(record), file=sys.stderr)
    else:
        print(f"{logging.getLevelName(level).lower()}: {message}", file=sys.stderr)
