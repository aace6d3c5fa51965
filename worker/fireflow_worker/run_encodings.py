"""Runs enqueued in an encoding DBOS-py cannot read, handled when they are claimed (I/O).

DBOS-py 3.4 reads a workflow's arguments in portable JSON and its own pickle only. A run enqueued by the
TypeScript SDK with its default encoding (`js_superjson`) would fail to start - and, as DBOS cannot even
record that failure in an encoding it does not know, stay PENDING forever. So every claimed run passes here
before DBOS executes it:

- portable JSON, pickle: executed as they are;
- the TypeScript SDK's own encoding: its arguments are decoded (see `js_encoding`) and the run is stored as
  portable JSON - its input rewritten, its result, error and events then written in portable JSON, which every
  SDK reads, the caller's included;
- anything else (Java's, a value with no JSON form): the run ends ERROR at once, its error in portable JSON,
  with one line naming the fix. Never PENDING, never retried.

Both are counted in `fireflow_run_encodings_total{encoding, outcome}`.
"""

from __future__ import annotations

import logging
from typing import Any

from dbos import DBOS

from fireflow_contract import run_request
from fireflow_contract.js_encoding import UndecodableValueError, decode_arguments
from fireflow_worker import dbos_internals, metrics, worker_db
from fireflow_worker.dbos_internals import ClaimedRun

log = logging.getLogger("fireflow.worker")

# The label of an encoding nobody here knows (label values must stay few).
OTHER_ENCODING = "other"
KNOWN_ENCODINGS = (*run_request.DECODED_ENCODINGS, "java_jackson", "go_json")
_PORTABLE_HINT = (
    "enqueue it in DBOS's portable JSON (TypeScript DBOSClient: serializationType 'portable'; DBOS-py: "
    "serialization_type=WorkflowSerializationFormat.PORTABLE) - see docs/run-contract.md"
)


def unreadable_message(encoding: str) -> str:
    shown = encoding if len(encoding) <= 64 else encoding[:63] + "…"
    return f"the run request is encoded as {shown!r}, which this worker cannot read: {_PORTABLE_HINT}"


def undecodable_message(err: UndecodableValueError) -> str:
    return f"invalid run request: {err}; send it as JSON data (a Date as its ISO string), or {_PORTABLE_HINT}"


def execute_claimed(dbos: DBOS, status: ClaimedRun, owner_xid: str) -> Any:
    """DBOS's dispatch of a claimed run, once its encoding is one DBOS reads (None when the run ended here)."""
    if not prepare_claimed(dbos, status, owner_xid):
        return None
    return dbos_internals.execute_dequeued(dbos, status, owner_xid)


def prepare_claimed(dbos: DBOS, status: ClaimedRun, owner_xid: str) -> bool:
    """Make a claimed run readable by DBOS, in the database and in `status`; False when it cannot be and was
    ended ERROR (or was no longer this claim's)."""
    encoding = status.get("serialization")
    if encoding is None or encoding in run_request.READABLE_ENCODINGS:
        return True
    run_id = str(status["workflow_uuid"])
    label = encoding if encoding in KNOWN_ENCODINGS else OTHER_ENCODING
    engine = dbos_internals.system_engine(dbos)
    problem: str
    if encoding in run_request.DECODED_ENCODINGS:
        try:
            arguments = decode_arguments(status["inputs"]) if status.get("inputs") is not None else []
        except UndecodableValueError as err:
            problem = undecodable_message(err)
        except (ValueError, TypeError, RecursionError) as err:
            problem = f"the run request in {encoding!r} cannot be decoded ({err}): {_PORTABLE_HINT}"
        else:
            inputs = run_request.portable_arguments(arguments[0] if arguments else None)
            if not worker_db.reencode_claimed_run(engine, run_id, owner_xid, run_request.PORTABLE_JSON, inputs):
                return False
            status["inputs"], status["serialization"] = inputs, run_request.PORTABLE_JSON
            metrics.RUN_ENCODINGS.labels(label, "decoded").inc()
            return True
    else:
        problem = unreadable_message(str(encoding))
    metrics.RUN_ENCODINGS.labels(label, "unreadable").inc()
    log.warning("run %s ends ERROR: %s", run_id, problem)
    # Its error in portable JSON, under that name, so that every SDK - the enqueuer's too - can read it.
    if worker_db.reencode_claimed_run(engine, run_id, owner_xid, run_request.PORTABLE_JSON, None):
        dbos_internals.end_claimed_run(dbos, run_id, run_request.portable_error(problem), owner_xid)
    return False
