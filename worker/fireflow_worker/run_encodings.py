"""Runs enqueued in an encoding other than portable JSON, made portable when they are claimed (I/O).

DBOS writes a run's result, error and stream events in the encoding its input was stored in. DBOS-py reads
portable JSON and its own pickle only; the TypeScript SDK reads portable JSON and its own superjson. So that
every SDK reads every run - its enqueuer's included - every claimed run passes here before DBOS executes it:

- portable JSON: executed as it is;
- DBOS-py's pickle (DBOSClient's default; a NULL encoding is DBOS-py's default too) and the TypeScript SDK's
  own encoding (`js_superjson`, its default, and the legacy JSON before it): the request is decoded (see
  `py_encoding`, `js_encoding`) and the run stored as portable JSON - its input rewritten, its result, error
  and events then written in portable JSON;
- anything else (Java's, a value with no JSON form, a pickle that does not load): the run ends ERROR at once,
  its error in portable JSON with one line naming the fix, its input replaced by a portable record of what
  was sent (`run_request.unreadable_arguments`). Never PENDING, never retried.

Counted in `fireflow_run_encodings_total{encoding, outcome}`; a run ended here also in
`fireflow_runs_failed_total`, so that the failure alert sees it.
"""

from __future__ import annotations

import logging
from typing import Any

from dbos import DBOS

from fireflow_contract import queues, run_request
from fireflow_contract.js_encoding import UndecodableValueError, decode_arguments
from fireflow_contract.py_encoding import portable_value
from fireflow_worker import dbos_internals, metrics, worker_db
from fireflow_worker.dbos_internals import ClaimedRun

log = logging.getLogger("fireflow.worker")

# The label of an encoding nobody here knows (label values must stay few).
OTHER_ENCODING = "other"
KNOWN_ENCODINGS = (*run_request.DECODED_ENCODINGS, "java_jackson", "go_json")
# The workflow's one parameter, should an enqueuer name it.
REQUEST_PARAMETER = "request"
_PORTABLE_HINT = (
    "enqueue it in DBOS's portable JSON (TypeScript DBOSClient: serializationType 'portable'; DBOS-py: "
    "serialization_type=WorkflowSerializationFormat.PORTABLE) - see docs/run-contract.md"
)


class UnreadableRequestError(Exception):
    """The claimed run's request cannot be read; the message is the run's error, one line."""


def unreadable_message(encoding: str) -> str:
    shown = encoding if len(encoding) <= 64 else encoding[:63] + "…"
    return f"the run request is encoded as {shown!r}, which this worker cannot read: {_PORTABLE_HINT}"


def undecodable_message(err: UndecodableValueError) -> str:
    return f"invalid run request: {err}; send it as JSON data, or {_PORTABLE_HINT}"


def execute_claimed(dbos: DBOS, status: ClaimedRun, owner_xid: str) -> Any:
    """DBOS's dispatch of a claimed run, once it is stored as portable JSON (None when the run ended here)."""
    if not prepare_claimed(dbos, status, owner_xid):
        return None
    return dbos_internals.execute_dequeued(dbos, status, owner_xid)


def prepare_claimed(dbos: DBOS, status: ClaimedRun, owner_xid: str) -> bool:
    """Store a claimed run as portable JSON, in the database and in `status`; False when it cannot be and was
    ended ERROR (or was no longer this claim's)."""
    encoding = status.get("serialization") or run_request.PY_PICKLE
    if encoding == run_request.PORTABLE_JSON:
        return True
    run_id = str(status["workflow_uuid"])
    label = encoding if encoding in KNOWN_ENCODINGS else OTHER_ENCODING
    engine = dbos_internals.system_engine(dbos)
    try:
        request = decoded_request(encoding, status.get("inputs"))
    except UnreadableRequestError as err:
        _end_unreadable(dbos, status, owner_xid, label, str(err))
        return False
    inputs = run_request.portable_arguments(request)
    if not worker_db.reencode_claimed_run(engine, run_id, owner_xid, run_request.PORTABLE_JSON, inputs):
        return False
    status["inputs"], status["serialization"] = inputs, run_request.PORTABLE_JSON
    metrics.RUN_ENCODINGS.labels(label, "decoded").inc()
    return True


def decoded_request(encoding: str, stored: str | None) -> Any:
    """The run request stored as `stored` in `encoding`, as plain JSON data; UnreadableRequestError."""
    if encoding not in run_request.DECODED_ENCODINGS:
        raise UnreadableRequestError(unreadable_message(encoding))
    if stored is None:
        return None  # the workflow then fails as any run without a request does
    try:
        if encoding == run_request.PY_PICKLE:
            args, kwargs = dbos_internals.pickled_arguments(stored)
            return portable_value(args[0] if args else kwargs.get(REQUEST_PARAMETER))
        arguments = decode_arguments(stored)
        return arguments[0] if arguments else None
    except UndecodableValueError as err:
        raise UnreadableRequestError(undecodable_message(err)) from None
    except Exception as err:  # a pickle may raise anything while loading (a class that is not here...)
        detail = " ".join((str(err) or type(err).__name__).split())[:300]
        raise UnreadableRequestError(
            f"the run request in {encoding!r} cannot be decoded ({detail}): {_PORTABLE_HINT}"
        ) from None


def _end_unreadable(dbos: DBOS, status: ClaimedRun, owner_xid: str, label: str, problem: str) -> None:
    """End the run ERROR with `problem`, its error and input in portable JSON, so every SDK - the enqueuer's
    too - reads and lists it."""
    run_id = str(status["workflow_uuid"])
    encoding = status.get("serialization") or run_request.PY_PICKLE
    inputs = run_request.unreadable_arguments(encoding, status.get("inputs"))
    engine = dbos_internals.system_engine(dbos)
    if not worker_db.reencode_claimed_run(engine, run_id, owner_xid, run_request.PORTABLE_JSON, inputs):
        return
    if not dbos_internals.end_claimed_run(dbos, run_id, run_request.portable_error(problem), owner_xid):
        return
    log.warning("run %s ended ERROR: %s", run_id, problem)
    metrics.RUN_ENCODINGS.labels(label, "unreadable").inc()
    queue = status.get("queue_name")
    metrics.run_counter(metrics.RUNS_FAILED, queue if queue in queues.ALL_QUEUES else "none").inc(1)
