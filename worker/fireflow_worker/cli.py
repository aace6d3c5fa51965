"""Command lines: `fireflow-worker` (run, migrate) and `fireflow` (run, status, save-flow).

Exit statuses: 0 success; 1 a runtime failure (a failed run, a failed migration, a refused start);
2 bad input (configuration, arguments, an invalid flow); 3 `migrate --plan` found a migration needed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fireflow_worker import migrate, queues
from fireflow_worker.config import ConfigError, load_config
from fireflow_worker.dburl import redact_url

EXIT_USAGE = 2


def _fail_usage(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_USAGE


def worker_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fireflow-worker", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("run", help="run the worker (the default)")
    mig = sub.add_parser("migrate", help="plan or apply the DBOS schema migration")
    mig.add_argument("--plan", action="store_true", help="print current/required versions; exit 3 if behind")
    mig.add_argument(
        "--exit-zero", action="store_true", help="with --plan: exit 0 when behind too (a Job reads the summary)"
    )
    mig.add_argument(
        "--lock-timeout-ms", type=int, default=int(os.environ.get("FIREFLOW_MIGRATION_LOCK_TIMEOUT_MS", "5000"))
    )
    mig.add_argument("--retries", type=int, default=int(os.environ.get("FIREFLOW_MIGRATION_RETRIES", "3")))
    mig.add_argument("--retry-delay-seconds", type=float, default=2.0)
    mig.add_argument(
        "--termination-log", default=None, help="default: $FIREFLOW_TERMINATION_LOG or /dev/termination-log"
    )
    args = parser.parse_args(argv)
    try:
        config = load_config()
    except ConfigError as err:
        return _fail_usage(str(err))
    if args.command == "migrate":
        return _migrate(args, config.database_url)
    from fireflow_worker.runtime import run_worker  # noqa: PLC0415 - keeps `migrate` light

    return run_worker(config)


def _migrate(args: argparse.Namespace, database_url: str | None) -> int:
    if database_url is None:
        return _fail_usage("migrate needs DATABASE_URL_EXECUTIONS (a postgresql:// URL)")
    if not 1 <= args.lock_timeout_ms <= 600_000:
        return _fail_usage(f"--lock-timeout-ms={args.lock_timeout_ms}: accepted: 1 to 600000")
    if not 0 <= args.retries <= 100:
        return _fail_usage(f"--retries={args.retries}: accepted: 0 to 100")
    try:
        if args.plan:
            summary = migrate.plan(database_url)
        else:
            summary = migrate.apply(
                database_url,
                lock_timeout_ms=args.lock_timeout_ms,
                retries=args.retries,
                retry_delay_seconds=args.retry_delay_seconds,
            )
    except Exception as err:
        summary = migrate.MigrationSummary(
            action="plan" if args.plan else "apply",
            result="failed",
            error=redact_url(" ".join(str(err).split()))[:1000],
        )
    migrate.report(summary, args.termination_log)
    if summary.result != "ok":
        return migrate.EXIT_ERROR
    if args.plan and summary.migration_needed and not args.exit_zero:
        return migrate.EXIT_MIGRATION_NEEDED
    return migrate.EXIT_UP_TO_DATE


def _parse_inputs(pairs: Sequence[str]) -> dict[str, Any]:
    """`k=v` pairs; a value that parses as JSON keeps its type (`n=3`, `tags=["a"]`), else it is text."""
    inputs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--input {pair!r}: expected name=value")
        try:
            inputs[key] = json.loads(raw)
        except json.JSONDecodeError:
            inputs[key] = raw
    return inputs


def client_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fireflow", description="Enqueue and follow FireFlow runs.")
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL_EXECUTIONS"))
    parser.add_argument("--application-name", default=os.environ.get("DBOS_APPLICATION_NAME", "fireflow"))
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="enqueue a run of FLOW (a YAML/JSON file, or a stored flow with --ref)")
    run.add_argument("flow")
    run.add_argument("--ref", action="store_true", help="FLOW names a stored flow")
    run.add_argument("--input", action="append", default=[], metavar="NAME=VALUE")
    run.add_argument("--queue", default=queues.EXECUTIONS, choices=queues.ALL_QUEUES)
    run.add_argument("--follow", action="store_true", help="stream node events live, then print the result")
    status = sub.add_parser("status", help="print a run's status")
    status.add_argument("run_id")
    save = sub.add_parser("save-flow", help="validate and store a flow under NAME")
    save.add_argument("name")
    save.add_argument("file")
    args = parser.parse_args(argv)
    if not args.database_url:
        return _fail_usage("set DATABASE_URL_EXECUTIONS or pass --database-url")

    from fireflow_worker.client import FireflowClient, read_flow_file  # noqa: PLC0415 - imports DBOS
    from fireflow_worker.flows.validate import FlowValidationError  # noqa: PLC0415

    try:
        with FireflowClient(args.database_url, application_name=args.application_name) as client:
            if args.command == "save-flow":
                client.save_flow(args.name, read_flow_file(args.file))
                print(f"saved flow {args.name}")
                return 0
            if args.command == "status":
                print(json.dumps(client.status(args.run_id).__dict__, default=str))
                return 0
            inputs = _parse_inputs(args.input)
            if args.ref:
                run_id = client.enqueue(flow_ref=args.flow, inputs=inputs, queue=args.queue)
            else:
                run_id = client.enqueue(read_flow_file(Path(args.flow)), inputs=inputs, queue=args.queue)
            print(f"enqueued run {run_id}", flush=True)
            if not args.follow:
                return 0
            return _follow(client, run_id)
    except (FlowValidationError, ValueError) as err:
        return _fail_usage(str(err))


def _follow(client: Any, run_id: str) -> int:
    for event in client.events(run_id):
        print(json.dumps(event, sort_keys=True), flush=True)
    try:
        result = client.result(run_id)
    except Exception as err:
        print(f"run {run_id} failed: {err}", flush=True)
        return 1
    print(json.dumps({"run_id": run_id, "result": result}, sort_keys=True, default=str), flush=True)
    return 0
