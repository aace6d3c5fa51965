"""`fireflow-worker migrate`: plan or apply the DBOS system-schema migration, then the project's objects.

DBOS sets no `lock_timeout`, so a migration queues behind any long reader and blocks every writer behind
itself. Apply runs with a lock timeout (default 5 s) and a bounded number of retries, so it fails fast and
says so instead. Every invocation prints one JSON line and, where the termination-log file is writable,
writes the same line there for Kubernetes to show in the Pod's status.
"""

from __future__ import annotations

import contextlib
import os
import time
import urllib.parse
from pathlib import Path
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from fireflow_contract import migration_summary
from fireflow_contract.dburl import libpq_url
from fireflow_contract.explain import database_error
from fireflow_contract.migration_summary import MigrationSummary
from fireflow_worker import migration_safety, schema

DEFAULT_TERMINATION_LOG = "/dev/termination-log"
# Exit statuses of `migrate --plan`: whether a migration is needed is the answer, not an error.
EXIT_UP_TO_DATE = 0
EXIT_ERROR = 1
EXIT_MIGRATION_NEEDED = 3


def dbos_migrations() -> list[str]:
    """The SQL of every migration the installed DBOS ships, in order (version n is item n-1)."""
    from fireflow_worker import dbos_internals  # noqa: PLC0415 - dbos only once needed, as in apply()

    return dbos_internals.dbos_migrations()


def required_version() -> int:
    """The schema version the installed DBOS requires (the count of its migrations)."""
    return len(dbos_migrations())


def _connect_unless_missing(database_url: str) -> psycopg.Connection[tuple[Any, ...]] | None:
    """A connection to the database, or None when the database does not exist yet."""
    try:
        return psycopg.connect(libpq_url(database_url), connect_timeout=10)
    except psycopg.OperationalError as err:
        if "does not exist" in str(err):
            return None
        raise


def current_version(database_url: str) -> int:
    """The recorded DBOS schema version; 0 when the database, schema or table does not exist yet."""
    conn = _connect_unless_missing(database_url)
    if conn is None:
        return 0
    with conn:
        exists = conn.execute("SELECT to_regclass('dbos.dbos_migrations') IS NOT NULL").fetchone()
        if not exists or not exists[0]:
            return 0
        row = conn.execute("SELECT version FROM dbos.dbos_migrations").fetchone()
        return int(row[0]) if row else 0


def plan(database_url: str) -> MigrationSummary:
    """What `apply` would do: a DBOS schema behind, or the project's objects (triggers) of an older version."""
    current = current_version(database_url)
    migrations = dbos_migrations()
    required = len(migrations)
    # A database without DBOS's tables has no worker on it to disturb: every step is safe to apply online.
    fresh = current == 0 and not _has_workflow_table(database_url)
    verdicts = [] if fresh else migration_safety.step_verdicts(migrations, current, required)
    objects = "current" if current > 0 and objects_version(database_url) == schema.OBJECTS_VERSION else "outdated"
    return MigrationSummary(
        action="plan",
        current_version=current,
        required_version=required,
        migration_needed=current < required or objects == "outdated",
        # The project's objects are replaced in one short transaction under the lock timeout: online-safe.
        online_safe=not verdicts,
        unsafe=[f"migration {v.version}: {v.reason}" for v in verdicts[:5]] or None,
        project_objects=objects,
    )


def _has_workflow_table(database_url: str) -> bool:
    """Whether DBOS's workflow table exists (an older DBOS keeps its version elsewhere, but has this table)."""
    conn = _connect_unless_missing(database_url)
    if conn is None:
        return False
    with conn:
        row = conn.execute("SELECT to_regclass('dbos.workflow_status') IS NOT NULL").fetchone()
        return bool(row and row[0])


def objects_version(database_url: str) -> str | None:
    """The version of the project's objects installed (None: none)."""
    with psycopg.connect(libpq_url(database_url), connect_timeout=10) as conn:
        return schema.installed_version(conn)


def with_lock_timeout(database_url: str, lock_timeout_ms: int) -> str:
    """The URL with `lock_timeout` set for every session libpq opens with it."""
    parts = urllib.parse.urlsplit(database_url)
    query = urllib.parse.parse_qsl(parts.query)
    query = [(key, value) for key, value in query if key != "options"]
    query.append(("options", f"-c lock_timeout={lock_timeout_ms}"))
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query, quote_via=urllib.parse.quote)))


def _is_lock_timeout(err: BaseException) -> bool:
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, pg_errors.LockNotAvailable) or isinstance(
            getattr(seen, "orig", None), pg_errors.LockNotAvailable
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def apply(
    database_url: str, *, lock_timeout_ms: int = 5000, retries: int = 3, retry_delay_seconds: float = 2.0
) -> MigrationSummary:
    """Migrate the DBOS schema (retrying only lock timeouts) and install the project's objects.

    Every session, the version check included, runs under the lock timeout: a reader that holds a lock
    on the schema's tables makes this fail fast, never queue.
    """
    from dbos import DBOS  # noqa: PLC0415 - the operator image imports this module without dbos

    url = with_lock_timeout(libpq_url(database_url), lock_timeout_ms)
    summary = MigrationSummary(action="apply", required_version=required_version())
    for attempt in range(1, retries + 2):
        summary.attempts = attempt
        try:
            summary.current_version = current_version(url)
            if summary.previous_version is None:
                summary.previous_version = summary.current_version
            if summary.current_version < summary.required_version:  # type: ignore[operator]
                DBOS.migrate(url)
            installed = schema.install(url)
            summary.current_version = current_version(url)
        except Exception as err:
            if _is_lock_timeout(err) and attempt <= retries:
                time.sleep(retry_delay_seconds)
                continue
            summary.result = migration_summary.FAILED
            detail = " ".join(str(getattr(err, "orig", None) or err).split())
            explained = None if _is_lock_timeout(err) else database_error(err, database_url)
            reason = "lock timeout" if _is_lock_timeout(err) else type(err).__name__
            summary.error = (explained or f"{reason}: {detail}")[:1000]
            break
        summary.project_objects = "installed" if installed else "present"
        break
    if summary.previous_version is not None and summary.required_version is not None:
        # Whether this apply had to move the schema (the version after it is current_version).
        summary.migration_needed = summary.previous_version < summary.required_version
    return summary


def report(summary: MigrationSummary, termination_log: str | None = None) -> None:
    """Print the summary line and, when possible, write it to the termination log."""
    line = summary.line()
    print(line, flush=True)
    path = Path(termination_log or os.environ.get("FIREFLOW_TERMINATION_LOG") or DEFAULT_TERMINATION_LOG)
    # Outside a container, or when the file is not ours to write, stdout alone carries the summary.
    with contextlib.suppress(OSError):
        path.write_text(line + "\n")
