"""The run contract (pure): what every program on the executions database agrees on with the worker, whatever
its language - the workflow's name, its queues, the run request (a JSON Schema kept beside this module), the
encodings, where a result and an error are, the events' stream and the run-end notification.

Documented in docs/run-contract.md; a change that an existing caller would notice bumps CONTRACT_VERSION.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema

from fireflow_contract import queues

CONTRACT_VERSION = 1

# The DBOS workflow that executes one run; its one positional argument is the run request.
WORKFLOW_NAME = "fireflow.run_flow"
QUEUES: tuple[str, ...] = queues.ALL_QUEUES
# The DBOS stream a run with `live` events writes them to, closed when the run ends.
EVENTS_STREAM = "events"
# `NOTIFY ff_workflow_terminal` with {"workflow_id", "status"} once a run ends with one of these.
TERMINAL_CHANNEL = "ff_workflow_terminal"
TERMINAL_STATUSES = ("SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")

# The request's fields (see the schema).
FLOW = "flow"
FLOW_REF = "flow_ref"
INPUTS = "inputs"
QUEUE = "queue"
EVENTS = "events"
# The event details a request may ask for; without `events`, a run of these queues is `live`, others `steps`.
STEPS_DETAIL = "steps"
LIVE_DETAIL = "live"
EVENT_DETAILS = (STEPS_DETAIL, LIVE_DETAIL)
LIVE_BY_DEFAULT_QUEUES = (queues.SANDBOX,)
# The enqueuer's W3C Trace Context (https://www.w3.org/TR/trace-context/), optional: the run's spans continue
# that trace (telemetry.py).
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

# DBOS's names of the encodings in `workflow_status.serialization`. The worker reads and writes portable JSON;
# it decodes DBOS-py's pickle and the TypeScript SDK's own encoding (superjson, and the legacy JSON before it)
# into portable JSON when it claims such a run, so that its result, error and events are portable too.
PORTABLE_JSON = "portable_json"
PY_PICKLE = "py_pickle"
JS_SUPERJSON = "js_superjson"
JS_LEGACY = "js_legacy"
DECODED_ENCODINGS = (PY_PICKLE, JS_SUPERJSON, JS_LEGACY)

# The `name` of every run error in its portable form {"name", "message", "code", "data"}.
RUN_ERROR_NAME = "RunFailedError"

REQUEST_SCHEMA_PATH = Path(__file__).with_name("schemas") / f"run-request.v{CONTRACT_VERSION}.schema.json"
_ONE_OF = "it must carry exactly one of flow and flow_ref"


@functools.cache
def request_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(REQUEST_SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    schema = request_schema()
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator: jsonschema.protocols.Validator = validator_class(schema)
    return validator


class _FieldChecks:
    """The schema's rule for each field, checked by hand (see `_plainly_valid`); a field the schema gains without
    a rule here sends its requests to jsonschema."""

    def __init__(self, schema: dict[str, Any]) -> None:
        props = schema["properties"]
        low, high = int(props[FLOW_REF]["minLength"]), int(props[FLOW_REF]["maxLength"])
        queues, details = frozenset(props[QUEUE]["enum"]), frozenset(props[EVENTS]["enum"])
        traceparent = re.compile(props[TRACEPARENT]["pattern"])
        tracestate_length = int(props[TRACESTATE]["maxLength"])
        self.by_field: dict[str, Callable[[Any], bool]] = {
            FLOW: lambda flow: type(flow) is dict,
            FLOW_REF: lambda ref: type(ref) is str and low <= len(ref) <= high,
            INPUTS: lambda inputs: type(inputs) is dict,
            QUEUE: lambda queue: type(queue) is str and queue in queues,
            EVENTS: lambda detail: type(detail) is str and detail in details,
            TRACEPARENT: lambda parent: type(parent) is str and traceparent.fullmatch(parent) is not None,
            TRACESTATE: lambda state: type(state) is str and len(state) <= tracestate_length,
        }


@functools.cache
def _field_checks() -> _FieldChecks:
    return _FieldChecks(request_schema())


def _plainly_valid(request: dict[str, Any]) -> bool:
    """True for a request the schema accepts, checked by hand: the worker checks every run's request, and
    jsonschema costs a tenth of a millisecond. False sends it to the schema (which then names the problems);
    tests/unit/test_run_request.py holds the two to the same verdicts."""
    checks = _field_checks().by_field
    if not request.keys() <= checks.keys() or (FLOW in request) == (FLOW_REF in request):
        return False
    return all(checks[field](value) for field, value in request.items())


def request_problems(request: Any) -> list[str]:
    """What makes `request` not a run request of this contract, one line each (empty: it is one)."""
    if not isinstance(request, dict):
        return [_ONE_OF]
    if _plainly_valid(request) or _validator().is_valid(request):  # the common cases, cheapest first
        return []
    problems = []
    for error in sorted(_validator().iter_errors(request), key=lambda e: (list(e.absolute_path), e.validator)):
        if error.validator == "oneOf" and not error.absolute_path:
            problems.append(_ONE_OF)
        elif error.validator == "additionalProperties":
            known = ", ".join(request_schema()["properties"])
            extra = ", ".join(sorted(set(request) - set(request_schema()["properties"])))
            problems.append(f"unknown field(s) {extra} (a run request has: {known})")
        else:
            where = ".".join(str(part) for part in error.absolute_path) or "request"
            problems.append(f"{where}: {_short(error.message)}")
    return problems


def _short(message: str, limit: int = 300) -> str:
    flat = " ".join(message.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def build_request(
    *,
    flow: dict[str, Any] | None = None,
    flow_ref: str | None = None,
    inputs: dict[str, Any],
    queue: str,
    events: str | None = None,
    trace_context: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A run request; ValueError naming the problems when it is not one. `trace_context`: the `traceparent`
    (and `tracestate`) of the enqueuer's span."""
    request: dict[str, Any] = {INPUTS: inputs, QUEUE: queue}
    if events is not None:
        request[EVENTS] = events
    request.update(trace_context or {})
    if flow_ref is not None:
        request[FLOW_REF] = flow_ref
    if flow is not None:
        request[FLOW] = flow
    problems = request_problems(request)
    if problems:
        raise ValueError("invalid run request: " + "; ".join(problems))
    return request


def request_in(inputs: Any) -> Any:
    """The run request in a run's inputs as DBOS-py's client reads them back (`{"args": [request], "kwargs":
    {}}`); None when there is none."""
    args = inputs.get("args") if isinstance(inputs, dict) else None
    return args[0] if args else None


def queue_of(request: Any) -> str:
    """The queue a run was enqueued on, from its request (DBOS clears a run's queue when it ends); the executions
    queue when the request names none of the contract's."""
    queue = request.get(QUEUE) if isinstance(request, dict) else None
    return str(queue) if queue in QUEUES else queues.EXECUTIONS


def event_detail(request: Any) -> str:
    """The run's event detail: its request's choice, else its queue's default."""
    if not isinstance(request, dict):
        return STEPS_DETAIL
    chosen = request.get(EVENTS)
    if chosen in EVENT_DETAILS:
        return str(chosen)
    return LIVE_DETAIL if request.get(QUEUE) in LIVE_BY_DEFAULT_QUEUES else STEPS_DETAIL


def portable_arguments(request: Any) -> str:
    """The workflow's input as DBOS's portable JSON encoding stores it (`workflow_status.inputs`)."""
    return json.dumps({"positionalArgs": [request], "namedArgs": {}}, separators=(",", ":"), ensure_ascii=False)


def unreadable_arguments(encoding: str, stored: str | None) -> str:
    """The input of a run ended at claim because its request could not be read, in portable JSON: one argument
    `{"encoding", "stored"}` holding the encoding it was sent in and its stored text, so that a portable reader
    lists the run and nothing of what was sent is lost."""
    return portable_arguments({"encoding": encoding, "stored": stored})


def portable_error(message: str) -> str:
    """A run's error as the worker stores it (portable JSON), for every SDK to read."""
    error = {"name": RUN_ERROR_NAME, "message": message, "code": None}
    return json.dumps(error, separators=(",", ":"), ensure_ascii=False)
