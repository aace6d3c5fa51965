"""A pool's runs in its database, read and acted on for `status` and `runs` (I/O).

Counts and lists are plain reads of DBOS's `workflow_status`, as the operator's own counts are
(database/versions_db.py, database/recovery.py); cancelling, resuming and forking go through DBOS's client, as
the `fireflow` client does, so DBOS keeps its own bookkeeping. A pool's runs are those waiting on its queues and
those its pods' executors ran or run; a queue several pools serve shows its waiting runs to each.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg

from fireflow_contract import executor_ids, resume, run_request
from fireflow_contract.run_request import TERMINAL_STATUSES
from fireflow_operator.database.dsn import libpq_dsn, redact
from fireflow_operator.kubectl_plugin.errors import PluginError
from fireflow_operator.kubectl_plugin.facts import PLUGIN_MANAGER, Obj, RunCounts

CONNECT_TIMEOUT_SECONDS = 10
STATEMENT_TIMEOUT_MS = 30_000
Connection = psycopg.Connection[tuple[object, ...]]


@dataclass(frozen=True)
class PoolDatabase:
    """A pool's database as the plugin reaches it: the URL and where it came from, for messages."""

    url: str
    source: str  # "Secret 'db' key 'url'", "--database-url", ...
    pool: str  # <namespace>/<name>
    application_name: str  # the pool's spec.dbos.applicationName: DBOS's client acts for it

    def unreachable(self, detail: str) -> PluginError:
        return PluginError(
            f"cannot reach the database of pool {self.pool} (the URL of {self.source}): {self.hide(detail)}; run "
            "where it is reachable, or forward its port (kubectl port-forward) and pass --database-host "
            "127.0.0.1:PORT (or --database-url)"
        )

    def refused(self, detail: str) -> PluginError:
        return PluginError(
            f"the database of pool {self.pool} answered, but a query failed: {self.hide(detail)}; the role of "
            f"{self.source} needs to read and write DBOS's schema"
        )

    def hide(self, text: str) -> str:
        return redact(" ".join(text.split()), self.url)


@contextlib.contextmanager
def _connection(db: PoolDatabase) -> Iterator[Connection]:
    try:
        conn = psycopg.connect(
            libpq_dsn(db.url),
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            application_name=PLUGIN_MANAGER,
            options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
            autocommit=True,
        )
    except psycopg.Error as err:
        raise db.unreachable(str(err)) from None
    with conn:
        try:
            yield conn
        except psycopg.Error as err:
            raise db.refused(str(err)) from None


def _migrated(conn: Connection) -> bool:
    return conn.execute("SELECT to_regclass('dbos.workflow_status') IS NOT NULL").fetchone() == (True,)


def run_counts(db: PoolDatabase, namespace: str, pool: str, pool_queues: list[str]) -> RunCounts:
    """PENDING runs per executor id of the pool's pods (every version's, no other pool's) and application
    version, ENQUEUED runs on its queues per application version, and the schema version."""
    pattern = executor_ids.pool_executor_pattern(namespace, pool)
    with _connection(db) as conn:
        if not _migrated(conn):
            return RunCounts()
        schema = conn.execute("SELECT max(version) FROM dbos.dbos_migrations").fetchone()
        rows = conn.execute(
            """
            SELECT status, application_version, CASE WHEN status = 'PENDING' THEN executor_id END, count(*)
              FROM dbos.workflow_status
             WHERE (status = 'PENDING' AND starts_with(executor_id, %s))
                OR (status = 'ENQUEUED' AND queue_name = ANY(%s))
             GROUP BY 1, 2, 3
            """,
            (executor_ids.statefulset_prefix(namespace, pool), pool_queues),
        ).fetchall()
    pending: dict[tuple[str, str | None], int] = {}
    enqueued: dict[str | None, int] = {}
    for status, version, executor, count in rows:
        name = None if version is None else str(version)
        if status == "ENQUEUED":
            enqueued[name] = enqueued.get(name, 0) + int(str(count))
        elif pattern.fullmatch(str(executor)):
            pending[(str(executor), name)] = int(str(count))
    version = schema[0] if schema else None
    return RunCounts(pending, enqueued, None if version is None else int(str(version)))


def _when(epoch_ms: object) -> str | None:
    if epoch_ms is None:
        return None
    return datetime.datetime.fromtimestamp(int(str(epoch_ms)) / 1000, datetime.UTC).isoformat()


def list_runs(
    db: PoolDatabase, namespace: str, pool: str, pool_queues: list[str], *, statuses: list[str], limit: int
) -> list[Obj]:
    """The pool's newest runs first: waiting on its queues, or run by its pods' executors."""
    executors = "^" + executor_ids.pool_executor_pattern(namespace, pool).pattern + "$"
    with _connection(db) as conn:
        if not _migrated(conn):
            return []
        rows = conn.execute(
            """
            SELECT workflow_uuid, status, queue_name, application_version, executor_id, created_at, updated_at
              FROM dbos.workflow_status
             WHERE (queue_name = ANY(%s) OR executor_id ~ %s)
               AND (cardinality(%s::text[]) = 0 OR status = ANY(%s::text[]))
             ORDER BY created_at DESC
             LIMIT %s
            """,
            (pool_queues, executors, statuses, statuses, limit),
        ).fetchall()
    return [
        {"runId": str(run_id), "status": str(status), "queue": queue, "applicationVersion": version,
         "executor": executor, "created": _when(created), "updated": _when(updated)}
        for run_id, status, queue, version, executor, created, updated in rows
    ]  # fmt: skip


def _statuses(db: PoolDatabase, run_ids: list[str]) -> dict[str, str]:
    with _connection(db) as conn:
        if not _migrated(conn):
            return {}
        rows = conn.execute(
            "SELECT workflow_uuid, status FROM dbos.workflow_status WHERE workflow_uuid = ANY(%s)", (run_ids,)
        ).fetchall()
    return {str(run_id): str(status) for run_id, status in rows}


def _checked(db: PoolDatabase, run_ids: list[str]) -> dict[str, str]:
    """The runs' statuses; a run that is not there is an error, before anything is changed."""
    found = _statuses(db, run_ids)
    for run_id in run_ids:
        if run_id not in found:
            raise PluginError(
                f"there is no run {run_id!r} on the database of pool {db.pool}: `kubectl fireflow runs list "
                f"{db.pool.split('/')[1]}` lists its runs"
            )
    return found


@contextlib.contextmanager
def _dbos_client(db: PoolDatabase) -> Iterator[Any]:
    from dbos import DBOSClient  # noqa: PLC0415 - heavy; only `runs cancel|resume` need it

    try:
        client = DBOSClient(
            system_database_url=libpq_dsn(db.url),
            application_name=db.application_name,
            system_database_pool_size=2,
            retry_connection_errors=False,  # one clear error, not a wait for a database that does not answer
        )
    except Exception as err:  # DBOS raises SQLAlchemy's and its own errors
        raise db.unreachable(str(err)) from None
    try:
        yield client
    except PluginError:
        raise
    except Exception as err:
        raise db.refused(str(err)[:500]) from None
    finally:
        client.destroy()


def cancel_runs(db: PoolDatabase, run_ids: list[str]) -> list[Obj]:
    """Cancel queued or running runs: each ends CANCELLED at once, its running node not retried. A run that ended
    otherwise is refused, and then none is cancelled."""
    before = _checked(db, run_ids)
    for run_id in run_ids:
        if before[run_id] in TERMINAL_STATUSES and before[run_id] != "CANCELLED":
            raise PluginError(
                f"run {run_id} already ended with {before[run_id]}; there is nothing to cancel (no run was cancelled)"
            )
    with _dbos_client(db) as client:
        for run_id in run_ids:
            if before[run_id] != "CANCELLED":
                client.cancel_workflow(run_id)
    after = _statuses(db, run_ids)
    return [{"runId": r, "was": before[r], "status": after.get(r)} for r in run_ids]


def _not_resumable(err: resume.NotResumableError) -> PluginError:
    return PluginError(str(err) if err.ended else f"{err} (`kubectl fireflow runs cancel` ends it)")


def resume_run(db: PoolDatabase, run_id: str) -> Obj:
    """Run an ended run again from where it stopped, by the rule `fireflow resume` follows (fireflow_contract.resume):
    a cancelled or abandoned run under its own id, a failed one forked from its first failed node."""
    status = _checked(db, [run_id])[run_id]
    try:
        in_place = resume.resumes_in_place(run_id, status)
    except resume.NotResumableError as err:
        raise _not_resumable(err) from None
    with _dbos_client(db) as client:
        found = client.list_workflows(workflow_ids=[run_id], load_input=True, load_output=False)
        queue = run_request.queue_of(run_request.request_in(found[0].input if found else None))
        if in_place:
            client.resume_workflow(run_id, queue_name=queue)
            return {"runId": run_id, "was": status, "running": run_id, "queue": queue, "fromStep": None}
        try:
            start = resume.fork_step(run_id, client.list_workflow_steps(run_id))
        except resume.NotResumableError as err:
            raise _not_resumable(err) from None
        handle: Any = client.fork_workflow(run_id, start, queue_name=queue)
        return {"runId": run_id, "was": status, "running": str(handle.get_workflow_id()), "queue": queue,
                "fromStep": start}  # fmt: skip
