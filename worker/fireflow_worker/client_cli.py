"""`fireflow`: enqueue runs and follow them, inspect, cancel and resume them, store flows, validate flows.

Exit statuses: 0 success; 1 the run did not succeed (failed, cancelled, abandoned), the request could not
be carried out (no such run, a run in the wrong state, the database unreachable) or `validate` found the flow
invalid; 2 bad input (arguments, an invalid flow or inputs). Every error is printed as `error: <one line>` on
stderr, one sentence naming the cause and the fix, with any database password redacted; `--debug` adds the
traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fireflow_contract import queues, run_request, worker_variables
from fireflow_contract.dburl import POSTGRES_SCHEMES, SecretMask, mask_logs, redact_url, url_problem
from fireflow_contract.explain import database_error
from fireflow_contract.version import version_line
from fireflow_worker.unclaimed import UnclaimedWatch, unclaimed_line

EXIT_FAILED = 1
EXIT_USAGE = 2
# Where the user gives the database URL, as an error's fix names it.
URL_SETTING = "DATABASE_URL_EXECUTIONS or --database-url"


def _error(message: str, status: int) -> int:
    for line in message.splitlines() or [""]:
        print(f"error: {redact_url(line)}", file=sys.stderr)
    return status


def _parse_inputs(pairs: Sequence[str]) -> dict[str, Any]:
    """`k=v` pairs; a value that parses as JSON keeps its type (`n=3`, `tags=["a"]`), else it is text."""
    inputs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--input {pair[:80]!r}: expected name=value")
        try:
            inputs[key] = json.loads(raw)
        except json.JSONDecodeError:
            inputs[key] = raw
        except (RecursionError, ValueError) as err:  # nested too deeply, an integer too long to convert
            raise ValueError(f"--input {key}: the value cannot be read: {str(err) or 'nested too deeply'}") from None
    return inputs


def _inputs_of(args: argparse.Namespace) -> dict[str, Any]:
    """`--inputs JSON` (validate only) merged with the `--input` pairs, which win."""
    inputs: dict[str, Any] = {}
    if getattr(args, "inputs", None) is not None:
        try:
            inputs = json.loads(args.inputs)
        except (json.JSONDecodeError, RecursionError, ValueError):
            raise ValueError('--inputs is not JSON: give a JSON object such as \'{"who": "Ada"}\'') from None
        if not isinstance(inputs, dict):
            raise ValueError('--inputs must be a JSON object of input names to values, such as \'{"who": "Ada"}\'')
    return {**inputs, **_parse_inputs(args.input)}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fireflow", description="Enqueue, follow, cancel and resume FireFlow runs; validate flows."
    )
    parser.add_argument("--version", action="version", version=version_line("fireflow"))
    parser.add_argument("--debug", action="store_true", help="print the traceback of an error")
    parser.add_argument("--database-url", default=os.environ.get(worker_variables.DATABASE_URL))
    parser.add_argument("--application-name", default=os.environ.get(worker_variables.APPLICATION_NAME, "fireflow"))
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="enqueue a run of FLOW (a YAML/JSON file, or a stored flow with --ref)")
    run.add_argument("flow")
    run.add_argument("--ref", action="store_true", help="FLOW names a stored flow")
    run.add_argument("--input", action="append", default=[], metavar="NAME=VALUE")
    run.add_argument("--queue", default=queues.EXECUTIONS, choices=queues.ALL_QUEUES)
    run.add_argument("--follow", action="store_true", help="stream node events live, then print the result")
    run.add_argument(
        "--events",
        choices=run_request.EVENT_DETAILS,
        default=None,
        help="the run's event detail: live writes every event as it happens (the default with --follow); "
        "steps derives them from the run's records (the default otherwise, except on fireflow-sandbox)",
    )
    status = sub.add_parser("status", help="print a run's status")
    status.add_argument("run_id")
    cancel = sub.add_parser("cancel", help="cancel a queued or running run")
    cancel.add_argument("run_id")
    resume = sub.add_parser("resume", help="run a cancelled, abandoned or failed run again from where it stopped")
    resume.add_argument("run_id")
    resume.add_argument("--follow", action="store_true", help="stream node events live, then print the result")
    check = sub.add_parser("validate", help="check a flow file (and run inputs) without any database")
    check.add_argument("flow")
    check.add_argument("--inputs", default=None, metavar="JSON", help="the run's inputs as one JSON object")
    check.add_argument("--input", action="append", default=[], metavar="NAME=VALUE")
    save = sub.add_parser("save-flow", help="validate and store a flow under NAME")
    save.add_argument("name")
    save.add_argument("file")
    return parser


def client_main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _main(args)
    except Exception as err:
        if args.debug:  # the traceback too, the URL's password masked in it as everywhere
            print(SecretMask([args.database_url or ""]).mask(traceback.format_exc()), file=sys.stderr, end="")
        return _explained(err, args.database_url)


def _explained(err: Exception, url: str | None) -> int:
    """The one line (and exit status) of an error: bad input 2, anything else 1."""
    from fireflow_worker.client import RunNotFoundError, RunStateError  # noqa: PLC0415
    from fireflow_worker.flows.validate import FlowValidationError  # noqa: PLC0415

    if isinstance(err, FlowValidationError):
        return _error(str(err), EXIT_USAGE)
    if isinstance(err, (RunNotFoundError, RunStateError)):
        return _error(str(err), EXIT_FAILED)
    if (sentence := database_error(err, url, URL_SETTING)) is not None:
        return _error(sentence, EXIT_FAILED)
    if isinstance(err, ValueError):
        return _error(" ".join(str(err).split()), EXIT_USAGE)
    return _error(f"{type(err).__name__}: {' '.join(str(err).split())[:1000]}", EXIT_FAILED)


def _main(args: argparse.Namespace) -> int:
    if args.command == "validate":
        return _validate(args)
    if args.command == "run" and not args.ref:
        _check_flow(args.flow, _inputs_of(args))  # before any database: a bad flow needs none to be told
    url: str | None = args.database_url
    if not url:
        return _error("no database URL: set DATABASE_URL_EXECUTIONS or pass --database-url", EXIT_USAGE)
    if not url.startswith((*POSTGRES_SCHEMES, "sqlite:///")):
        return _error(f"the database URL {redact_url(url)!r} must be a postgresql:// URL", EXIT_USAGE)
    if url.startswith(POSTGRES_SCHEMES) and (problem := url_problem(url)):
        return _error(f"the database URL {redact_url(url)!r} {problem}", EXIT_USAGE)
    mask_logs([url])
    # The command reports every error itself, in one line; DBOS's own log lines would only repeat it.
    logging.getLogger("dbos").setLevel(logging.CRITICAL)
    from fireflow_worker.client import FireflowClient  # noqa: PLC0415 - imports DBOS

    with FireflowClient(url, application_name=args.application_name) as client:
        return _command(client, args)


def _check_flow(path: str, inputs: dict[str, Any] | None) -> str:
    """Validate a flow file and, unless None, run inputs (FlowValidationError); returns a line on the flow."""
    from fireflow_worker.flows.validate import load_flow, read_flow_file, validate_run_inputs  # noqa: PLC0415

    flow = load_flow(read_flow_file(Path(path)))
    if inputs is not None:
        validate_run_inputs(flow, inputs)
    declared = ", ".join(flow.inputs) or "none"
    return f"flow {flow.name!r} in {path} is valid: {len(flow.nodes)} nodes, inputs: {declared}"


def _validate(args: argparse.Namespace) -> int:
    from fireflow_worker.flows.validate import FlowValidationError  # noqa: PLC0415

    given = args.inputs is not None or bool(args.input)
    inputs = _inputs_of(args) if given else None  # none given: the flow alone is checked
    try:
        print(_check_flow(args.flow, inputs))
    except FlowValidationError as err:
        return _error(str(err), EXIT_FAILED)
    return 0


def _command(client: Any, args: argparse.Namespace) -> int:
    from fireflow_worker.flows.validate import read_flow_file  # noqa: PLC0415

    if args.command == "save-flow":
        client.save_flow(args.name, read_flow_file(args.file))
        print(f"saved flow {args.name}")
        return 0
    if args.command == "status":
        print(json.dumps(client.status(args.run_id).__dict__, default=str))
        return 0
    if args.command == "cancel":
        status = client.cancel(args.run_id)
        print(f"cancelled run {args.run_id}" if status.status == "CANCELLED" else f"run {args.run_id}: {status.status}")
        return 0
    if args.command == "resume":
        run_id = client.resume(args.run_id)
        same = run_id == args.run_id
        print(f"resumed run {run_id}" if same else f"resumed run {args.run_id} as new run {run_id}", flush=True)
        return _follow(client, run_id) if args.follow else 0
    inputs = _inputs_of(args)
    events = args.events or (run_request.LIVE_DETAIL if args.follow else None)
    if args.ref:
        run_id = client.enqueue(flow_ref=args.flow, inputs=inputs, queue=args.queue, events=events)
    else:
        run_id = client.enqueue(read_flow_file(Path(args.flow)), inputs=inputs, queue=args.queue, events=events)
    print(f"enqueued run {run_id}", flush=True)
    return _follow(client, run_id) if args.follow else 0


def _unclaimed(client: Any, run_id: str) -> str | None:
    """The line to print while the run waits for a worker; None once one claimed it."""
    status = client.status(run_id)
    if status.status != "ENQUEUED":
        return None
    latest = None if status.app_version else client.latest_version()
    return unclaimed_line(run_id, status.flow_queue or queues.EXECUTIONS, status.app_version, latest)


def _follow(client: Any, run_id: str) -> int:
    from fireflow_worker.client import RunAbandonedError, RunCancelledError  # noqa: PLC0415

    watch = UnclaimedWatch(lambda: _unclaimed(client, run_id)).start()
    try:
        for event in client.events(run_id):
            watch.cancel()
            print(json.dumps(event, sort_keys=True), flush=True)
    finally:
        watch.cancel()
    try:
        result = client.result(run_id)
    except (RunCancelledError, RunAbandonedError) as err:
        print(str(err), flush=True)
        return EXIT_FAILED
    except Exception as err:
        print(f"run {run_id} failed: {' '.join(str(err).split())}", flush=True)
        return EXIT_FAILED
    print(json.dumps({"run_id": run_id, "result": result}, sort_keys=True, default=str), flush=True)
    return 0
