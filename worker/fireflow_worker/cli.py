"""Command lines: `fireflow-worker` (run, migrate) and `fireflow` (see `client_cli`).

Exit statuses: 0 success; 1 a runtime failure (a failed run, a failed migration, a refused start);
2 bad input (configuration, arguments, an invalid flow); 3 `migrate --plan` found a migration needed;
70 a worker whose own machinery broke (it exits so that it is restarted).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
from collections.abc import Sequence

from fireflow_contract import migration_summary, worker_variables
from fireflow_contract.dburl import mask_logs, redact_url
from fireflow_contract.explain import database_error
from fireflow_contract.logformat import configure, early_error
from fireflow_contract.migration_summary import MigrationSummary
from fireflow_contract.version import version_line
from fireflow_worker import migrate
from fireflow_worker.client_cli import client_main
from fireflow_worker.config import ConfigError, WorkerConfig, load_config
from fireflow_worker.env_names import unknown_variable_warnings
from fireflow_worker.processes import SUPERVISOR_PID_ENV

__all__ = ["client_main", "worker_main"]

EXIT_USAGE = 2
PR_SET_PDEATHSIG = 1


def _fail_usage(message: str) -> int:
    early_error(message)
    return EXIT_USAGE


def worker_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fireflow-worker", description=__doc__)
    parser.add_argument("--version", action="version", version=version_line("fireflow-worker"))
    parser.add_argument("--debug", action="store_true", help="log at debug level, tracebacks included")
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
    if args.debug:  # as DBOS_LOG_LEVEL=DEBUG, for a supervisor's worker processes too
        os.environ[worker_variables.LOG_LEVEL] = "DEBUG"
    try:
        config = load_config()
    except ConfigError as err:
        return _fail_usage(str(err))
    if not os.environ.get(SUPERVISOR_PID_ENV):  # a supervisor has said it for its processes
        _warn_unknown_variables(config)
    if args.command == "migrate":
        configure(config.log_level, config.log_format)
        mask_logs([config.database_url or ""])  # DBOS logs the URL it migrates, query password included
        return _migrate(args, config.database_url)
    processes = config.processes
    if processes > 1 and not os.environ.get(SUPERVISOR_PID_ENV):
        from fireflow_worker.supervisor import run_supervisor  # noqa: PLC0415

        return run_supervisor(config, processes)
    if os.environ.get(SUPERVISOR_PID_ENV):
        _die_with_supervisor(int(os.environ[SUPERVISOR_PID_ENV]))
    from fireflow_worker.runtime import run_worker  # noqa: PLC0415 - keeps `migrate` light

    return run_worker(config)


def _warn_unknown_variables(config: WorkerConfig) -> None:
    configure(config.log_level, config.log_format)
    read = [info.alias for info in WorkerConfig.model_fields.values() if info.alias]
    for line in unknown_variable_warnings(os.environ, read):
        logging.getLogger("fireflow.worker").warning("%s", line)


def _die_with_supervisor(supervisor_pid: int) -> None:
    """A supervised worker is killed with its supervisor, as the container's processes are when its PID 1
    dies (outside a container nothing else would end them)."""
    try:
        import ctypes  # noqa: PLC0415

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return
    if os.getppid() != supervisor_pid:  # it died before the prctl
        os._exit(1)


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
        said = database_error(err, database_url) or " ".join(str(err).split())
        summary = MigrationSummary(
            action="plan" if args.plan else "apply", result=migration_summary.FAILED, error=redact_url(said)[:1000]
        )
    summary.error = None if summary.error is None else redact_url(summary.error)
    migrate.report(summary, args.termination_log)
    if not summary.ok:
        return migrate.EXIT_ERROR
    if args.plan and summary.migration_needed and not args.exit_zero:
        return migrate.EXIT_MIGRATION_NEEDED
    return migrate.EXIT_UP_TO_DATE
