"""The operator's look at a pool's database: limits, usage, schema version, queue owners, and whose runs are
PENDING (I/O).

Two failures are told apart, because they need different fixes: the server cannot be reached
(`DatabaseUnreachableError`: network, DNS, credentials, a missing database) and a query failed on a server
that answered (`DatabaseQueryError`: permissions, a damaged schema). The probe reads only catalogs that
every DBOS schema version has, so a database left at any older version is still probed and migrated.

What the server said is kept per database (`Snapshots`) and shared by the reconciles of all its pools: a
reconcile may take a snapshot up to `max_age_seconds` old (a resync takes one a resync period old; a change
looks afresh), and reconciles of one database that want a fresh one at once share one probe. A failure is
kept likewise, so the pools of an unreachable database do not each wait for their own timeout.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import psycopg

from fireflow_contract.executor_ids import APPLICATION_NAME_BYTES, WORKER_CONNECTION_PREFIX
from fireflow_operator.api.names import MIGRATION_APPLICATION_NAME, OPERATOR_APPLICATION_NAME
from fireflow_operator.database.facts import DatabaseFacts, Usage
from fireflow_operator.database.kept_connections import (
    DatabaseQueryError,
    DatabaseUnreachableError,
    database_connection,
    database_key,
)


def pool_connection_prefix(namespace: str, statefulset: str) -> str:
    """The application_name prefix of every connection of a pool's workers (`<prefix><ordinal>`)."""
    return f"{WORKER_CONNECTION_PREFIX}{namespace}.{statefulset}-"


def is_pool_connection(application_name: str, prefixes: Iterable[str]) -> bool:
    """Whether a connection belongs to one of the known pools (names may be cut at 63 bytes)."""
    if not application_name.startswith(WORKER_CONNECTION_PREFIX):
        return False
    for prefix in prefixes:
        if application_name.startswith(prefix):
            return True
        if len(application_name.encode()) >= APPLICATION_NAME_BYTES and prefix.startswith(application_name):
            return True
    return False


def count_others(
    rows: Iterable[tuple[str | None, str | None, str | None]], *, database: str, role: str, pool_prefixes: list[str]
) -> Usage:
    """Client connections that are neither a known pool's workers, a migration Job (both budgeted) nor the
    operator's connection to this database (reserved: budget.OPERATOR_CONNECTION), per scope. The operator's
    connections to the server's other databases, which it keeps between reconciles, are others' usage here.

    `rows` are (usename, datname, application_name) of the server's client backends.
    """
    server = on_database = of_role = 0
    for usename, datname, application_name in rows:
        name = application_name or ""
        own_connection = name == OPERATOR_APPLICATION_NAME and datname == database
        if own_connection or name == MIGRATION_APPLICATION_NAME or is_pool_connection(name, pool_prefixes):
            continue
        server += 1
        on_database += datname == database
        of_role += usename == role
    return Usage(server, on_database, of_role)


_LIMITS = """
SELECT current_setting('max_connections')::int,
       current_setting('superuser_reserved_connections')::int,
       coalesce(current_setting('reserved_connections', true), '0')::int,
       current_database(), current_user,
       (SELECT rolsuper FROM pg_roles WHERE rolname = current_user),
       (SELECT rolconnlimit FROM pg_roles WHERE rolname = current_user),
       (SELECT datconnlimit FROM pg_database WHERE datname = current_database()),
       coalesce(host(inet_server_addr()), 'local') || ':' || coalesce(inet_server_port(), 0)
"""
# Other roles' connections show a NULL backend_type to an unprivileged role: one in a database is a client.
_CONNECTIONS = """
SELECT usename, datname, application_name FROM pg_stat_activity
 WHERE pid <> pg_backend_pid()
   AND (backend_type = 'client backend' OR (backend_type IS NULL AND datname IS NOT NULL))
"""


def _server_identity(conn: psycopg.Connection[tuple[object, ...]], fallback: str) -> str:
    """The cluster's system identifier (the same whichever host name reaches it), else address:port."""
    try:
        with conn.transaction():
            row = conn.execute("SELECT system_identifier::text FROM pg_control_system()").fetchone()
    except psycopg.Error:
        return fallback
    return f"pg-{row[0]}" if row else fallback


# One statement for the schema's state: every object it reads may be missing at an older schema version.
_SCHEMA = """
SELECT to_regclass('dbos.dbos_migrations') IS NOT NULL,
       to_regclass('dbos.workflow_status') IS NOT NULL,
       (SELECT count(*) = 1 FROM pg_attribute WHERE attrelid = to_regclass('dbos.queues')
           AND attname = 'application_name' AND NOT attisdropped)
"""


def _schema_facts(conn: psycopg.Connection[tuple[object, ...]]) -> tuple[int, tuple[str, ...], tuple[str, ...]]:
    """The schema version, the applications owning fireflow queues, and the executors with PENDING runs."""
    row = conn.execute(_SCHEMA).fetchone()
    has_migrations, has_runs, has_owners = row if row is not None else (False, False, False)
    version = 0
    owners: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()
    if has_migrations:
        found = conn.execute("SELECT version FROM dbos.dbos_migrations").fetchone()
        version = int(str(found[0])) if found else 0
    if has_owners:  # dbos.queues and its application_name column arrived in later schema versions
        rows = conn.execute(
            "SELECT DISTINCT application_name FROM dbos.queues WHERE application_name IS NOT NULL "
            "AND name LIKE 'fireflow-%%'"
        ).fetchall()
        owners = tuple(sorted(str(r[0]) for r in rows))
    if has_runs:  # never migrated: no worker ever ran, so no run is PENDING
        rows = conn.execute("SELECT DISTINCT executor_id FROM dbos.workflow_status WHERE status = 'PENDING'").fetchall()
        pending = tuple(sorted(str(r[0]) for r in rows if r[0] is not None))
    return version, owners, pending


@dataclass(frozen=True)
class Snapshot:
    """What one probe read from a database, for every pool on it."""

    limits: tuple[object, ...]  # _LIMITS' columns
    server: str
    clients: tuple[tuple[str | None, str | None, str | None], ...]  # (usename, datname, application_name)
    schema_version: int
    queue_owners: tuple[str, ...]  # applications owning fireflow queues
    pending_executors: tuple[str, ...]  # executor ids with PENDING runs
    taken: float  # monotonic seconds when the probe started


def take_snapshot(url: str, timeout_seconds: int) -> Snapshot:
    """Probe the database once (raises the two errors above)."""
    taken = time.monotonic()
    with database_connection(url, timeout_seconds) as conn:
        try:
            with conn.transaction():  # one transaction for the whole look, not one per statement
                limits = conn.execute(_LIMITS).fetchone()
                assert limits is not None
                server = _server_identity(conn, str(limits[-1]))
                clients = conn.execute(_CONNECTIONS).fetchall()
                version, owners, pending = _schema_facts(conn)
        except psycopg.Error as err:
            raise DatabaseQueryError(" ".join(str(err).split())) from None
    rows = tuple((_str(u), _str(d), _str(a)) for u, d, a in clients)
    return Snapshot(tuple(limits), server, rows, version, owners, pending, taken)


class Snapshots:
    """The last snapshot (or failure) of each database, and one probe at a time per database."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[float, Snapshot | Exception]] = {}
        self._locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
        self._lock = threading.Lock()

    def get(self, url: str, timeout_seconds: int, max_age_seconds: float) -> Snapshot:
        """A snapshot taken no earlier than `max_age_seconds` before this call (0: one that starts now, or a
        probe of another caller that started after this call did)."""
        asked = time.monotonic()
        key = database_key(url)
        with self._lock:
            lock = self._locks[key]
        with lock:
            kept = self._kept.get(key)
            if kept is None or kept[0] < asked - max_age_seconds:
                try:
                    kept = (time.monotonic(), take_snapshot(url, timeout_seconds))
                except (DatabaseUnreachableError, DatabaseQueryError) as err:
                    kept = (asked, err)
                self._kept[key] = kept
        if isinstance(kept[1], Exception):
            raise kept[1]
        return kept[1]


SNAPSHOTS = Snapshots()  # one per operator process


def probe_database(
    url: str, application_name: str, *, timeout_seconds: int, pool_prefixes: list[str], max_age_seconds: float = 0.0
) -> DatabaseFacts:
    """The server's limits and usage and the schema's state, as one pool sees them (its application, the known
    pools' connections); read at most `max_age_seconds` ago."""
    snapshot = SNAPSHOTS.get(url, timeout_seconds, max_age_seconds)
    max_conn, su_reserved, reserved, database, role, superuser, role_limit, db_limit, _ = snapshot.limits
    others = count_others(snapshot.clients, database=str(database), role=str(role), pool_prefixes=pool_prefixes)
    return DatabaseFacts(
        server=snapshot.server,
        database=str(database),
        role=str(role),
        superuser=bool(superuser),
        max_connections=int(str(max_conn)),
        superuser_reserved=int(str(su_reserved)),
        reserved=int(str(reserved)),
        database_limit=int(str(db_limit)),
        role_limit=int(str(role_limit)),
        others=others,
        schema_version=snapshot.schema_version,
        foreign_applications=tuple(owner for owner in snapshot.queue_owners if owner != application_name),
        pending_executors=snapshot.pending_executors,
    )


def _str(value: object) -> str | None:
    return None if value is None else str(value)
