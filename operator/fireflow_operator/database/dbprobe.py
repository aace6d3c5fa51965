"""The operator's look at a pool's database: limits, usage, schema version, queue owners (I/O).

Two failures are told apart, because they need different fixes: the server cannot be reached
(`DatabaseUnreachableError`: network, DNS, credentials, a missing database) and a query failed on a server
that answered (`DatabaseQueryError`: permissions, a damaged schema). The probe reads only catalogs that
every DBOS schema version has, so a database left at any older version is still probed and migrated.
"""

from __future__ import annotations

from collections.abc import Iterable

import psycopg

from fireflow_contract.executor_ids import APPLICATION_NAME_BYTES, WORKER_CONNECTION_PREFIX
from fireflow_operator.api.names import MIGRATION_APPLICATION_NAME, OPERATOR_APPLICATION_NAME
from fireflow_operator.database.facts import DatabaseFacts, Usage
from fireflow_operator.database.kept_connections import DatabaseQueryError, database_connection


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


def _schema_facts(conn: psycopg.Connection[tuple[object, ...]], application_name: str) -> tuple[int, tuple[str, ...]]:
    version = 0
    if conn.execute("SELECT to_regclass('dbos.dbos_migrations') IS NOT NULL").fetchone() == (True,):
        row = conn.execute("SELECT version FROM dbos.dbos_migrations").fetchone()
        version = int(str(row[0])) if row else 0
    # dbos.queues and its application_name column arrived in later schema versions.
    has_owners = conn.execute(
        "SELECT count(*) = 1 FROM pg_attribute WHERE attrelid = to_regclass('dbos.queues') "
        "AND attname = 'application_name' AND NOT attisdropped"
    ).fetchone()
    if has_owners != (True,):
        return version, ()
    owners = conn.execute(
        "SELECT DISTINCT application_name FROM dbos.queues WHERE application_name IS NOT NULL "
        "AND application_name <> %s AND name LIKE 'fireflow-%%'",
        (application_name,),
    ).fetchall()
    return version, tuple(sorted(str(r[0]) for r in owners))


def probe_database(url: str, application_name: str, *, timeout_seconds: int, pool_prefixes: list[str]) -> DatabaseFacts:
    """Read the server's limits and usage and the schema's state."""
    with database_connection(url, timeout_seconds) as conn:
        try:
            limits = conn.execute(_LIMITS).fetchone()
            assert limits is not None
            max_conn, su_reserved, reserved, database, role, superuser, role_limit, db_limit, address = limits
            server = _server_identity(conn, str(address))
            clients = conn.execute(_CONNECTIONS).fetchall()
            version, foreign = _schema_facts(conn, application_name)
        except psycopg.Error as err:
            raise DatabaseQueryError(" ".join(str(err).split())) from None
    others = count_others(
        [(_str(u), _str(d), _str(a)) for u, d, a in clients],
        database=str(database),
        role=str(role),
        pool_prefixes=pool_prefixes,
    )
    return DatabaseFacts(
        server=server,
        database=str(database),
        role=str(role),
        superuser=bool(superuser),
        max_connections=int(str(max_conn)),
        superuser_reserved=int(str(su_reserved)),
        reserved=int(str(reserved)),
        database_limit=int(str(db_limit)),
        role_limit=int(str(role_limit)),
        others=others,
        schema_version=version,
        foreign_applications=foreign,
    )


def _str(value: object) -> str | None:
    return None if value is None else str(value)
