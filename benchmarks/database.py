"""The benchmark's side of the database: fresh databases from migrated templates, the load counters, and a
connection that watches runs without being counted as load.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg

from benchmarks.procs import migrate
from benchmarks.workload import Kind
from fireflow_local.postgres import LocalPostgres
from fireflow_worker.schema import ENQUEUED_PREFIX, WAKE_CHANNEL

TERMINAL = ("SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")
# The run-end announcement every FireFlow deployment has (the TypeScript worker and API install it; so does
# `fireflow-worker migrate`): on the raw DBOS-py and DBOS-TS databases too, so that every kind pays for the
# notification it sends (PostgreSQL wakes every listening backend of the database for each one).
RUN_END_TRIGGER = (
    """
    CREATE OR REPLACE FUNCTION public.bench_notify_terminal() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.status IN ('SUCCESS', 'ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')
           AND NEW.status IS DISTINCT FROM OLD.status THEN
            PERFORM pg_notify('ff_workflow_terminal',
                json_build_object('workflow_id', NEW.workflow_uuid, 'status', NEW.status)::text);
        END IF;
        RETURN NEW;
    END
    $$
    """,
    """
    CREATE OR REPLACE TRIGGER bench_workflow_terminal AFTER UPDATE OF status ON dbos.workflow_status
        FOR EACH ROW EXECUTE FUNCTION public.bench_notify_terminal()
    """,
)


class BenchmarkError(RuntimeError):
    """A measurement could not be taken (a run failed, a worker died, a timeout)."""


class Databases:
    """One migrated template database per kind; each measurement gets a fresh copy of its kind's template
    (`CREATE DATABASE ... TEMPLATE`), so the migration runs once per kind, not once per measurement."""

    def __init__(self, server: LocalPostgres) -> None:
        self.server = server
        self._templates: dict[str, str] = {}
        self._made: list[str] = []

    def prepare(self, kinds: tuple[Kind, ...]) -> None:
        with self.admin() as admin:
            # The view is created where the benchmark reads it (`postgres`); it reports every database.
            admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        for kind in {_schema_of(kind) for kind in kinds}:
            name = f"bench_template_{kind}"
            url = self.server.create_database(name)
            migrate(kind, url)
            if kind != "fireflow":  # FireFlow's migration installs it with the rest of its objects
                with psycopg.connect(url, autocommit=True) as conn:
                    for statement in RUN_END_TRIGGER:
                        conn.execute(statement)
            self._templates[kind] = name

    def fresh(self, label: str, kind: Kind, *, keep_others: bool = False) -> str:
        """A new database migrated the way `kind` is deployed; returns its URL. The previous measurements'
        databases are dropped first (a fleet of them would otherwise fill the disk and the catalogue), unless
        `keep_others`: a database for a drain beside the last one's."""
        if not keep_others:
            self.drop_made()
        name = f"bench_{label.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
        with self.admin() as admin:
            admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self._templates[_schema_of(kind)]}"')
        self._made.append(name)
        return self.server.url(name)

    def drop_made(self) -> None:
        with self.admin() as admin:
            for name in self._made:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._made.clear()

    def admin(self) -> psycopg.Connection[Any]:
        """A connection to the `postgres` database: what it runs is not counted against a measured database."""
        return psycopg.connect(self.server.url(), autocommit=True)


def _schema_of(kind: Kind) -> Kind:
    """Raw DBOS-py, sync or async, runs on plain `dbos migrate`'s schema."""
    return "raw" if kind == "raw-async" else kind


@dataclass(frozen=True)
class Counters:
    """Cumulative load counters of one database."""

    statements: int  # sum(calls) of pg_stat_statements since its last reset
    commits: int  # pg_stat_database.xact_commit

    @staticmethod
    def read(admin: psycopg.Connection[Any], database_url: str) -> Counters:
        admin.execute("SELECT pg_stat_clear_snapshot()")
        row = admin.execute(
            """
            SELECT (SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s WHERE s.dbid = d.datid),
                   d.xact_commit
            FROM pg_stat_database d WHERE d.datname = %s
            """,
            (database_url.rsplit("/", 1)[1],),
        ).fetchone()
        if row is None:
            raise BenchmarkError(f"no statistics for {database_url.rsplit('/', 1)[1]}")
        return Counters(int(row[0]), int(row[1]))

    def __sub__(self, other: Counters) -> Counters:
        return Counters(self.statements - other.statements, self.commits - other.commits)


@dataclass(frozen=True)
class StatementShare:
    """One normalised statement of a database since the last `pg_stat_statements_reset()`."""

    query: str
    calls: int
    exec_ms: float  # total execution time

    @staticmethod
    def read(admin: psycopg.Connection[Any], database_url: str) -> tuple[StatementShare, ...]:
        rows = admin.execute(
            """
            SELECT s.query, s.calls, s.total_exec_time FROM pg_stat_statements s
            JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s ORDER BY s.calls DESC
            """,
            (database_url.rsplit("/", 1)[1],),
        ).fetchall()
        return tuple(StatementShare(" ".join(str(q).split()), int(c), float(t)) for q, c, t in rows)


@dataclass(frozen=True)
class FunctionTime:
    """A PL/pgSQL function of the connected database (a trigger's): calls and time in it, since the database
    was made; counted only with `track_functions = 'pl'`."""

    name: str
    calls: int
    self_ms: float

    @staticmethod
    def read(conn: psycopg.Connection[Any]) -> tuple[FunctionTime, ...]:
        rows = conn.execute(
            "SELECT schemaname || '.' || funcname, calls, self_time FROM pg_stat_user_functions ORDER BY 1"
        ).fetchall()
        return tuple(FunctionTime(str(name), int(calls), float(self_ms)) for name, calls, self_ms in rows)


class RunWatcher:
    """Reads `dbos.workflow_status` of a measured database. Its statements are kept out of
    `pg_stat_statements` (`pg_stat_statements.track = none` for this connection) and counted in `queries`, so
    that each of them (one autocommit transaction each) can be subtracted from the database's commits."""

    def __init__(self, database_url: str) -> None:
        self._conn = psycopg.connect(database_url, autocommit=True)
        self._conn.execute("SET pg_stat_statements.track = 'none'")
        self.queries = 0

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> RunWatcher:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        self.queries += 1
        return self._conn.execute(query).fetchall()

    def release(self, version: str, queue: str) -> int:
        """Hand every held run to the workers in one transaction: their version becomes the workers', and the
        enqueue notification any enqueue would send goes out (FireFlow's claimers wake on it; the others poll).
        Returns the database clock (ms) of the release."""
        self.queries += 1
        with self._conn.transaction():
            self._conn.execute(
                "UPDATE dbos.workflow_status SET application_version = %s WHERE status = 'ENQUEUED'", (version,)
            )
            self._conn.execute("SELECT pg_notify(%s, %s)", (WAKE_CHANNEL, ENQUEUED_PREFIX + queue))
            row = self._conn.execute("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint").fetchone()
        assert row is not None
        return int(row[0])

    def statuses(self) -> dict[str, int]:
        rows = self.rows("SELECT status, count(*) FROM dbos.workflow_status GROUP BY status")
        return {str(status): int(count) for status, count in rows}

    def all_ended(self, runs: int) -> bool:
        """Whether `runs` runs have ended; raises unless every one of them is SUCCESS."""
        counts = self.statuses()
        if sum(counts.get(status, 0) for status in TERMINAL) < runs:
            return False
        if counts.get("SUCCESS", 0) != runs:
            raise BenchmarkError(f"not every run succeeded: {counts}")
        return True

    def wait_all_succeeded(self, runs: int, *, timeout: float, interval: float) -> None:
        """Until `runs` runs have ended; raises unless every one of them is SUCCESS."""
        deadline = time.monotonic() + timeout
        while not self.all_ended(runs):
            if time.monotonic() > deadline:
                raise BenchmarkError(f"runs not finished after {timeout:.0f} s: {self.statuses()}")
            time.sleep(interval)
