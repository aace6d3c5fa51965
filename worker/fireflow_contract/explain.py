"""Errors as one sentence naming the cause and the fix, for every command line of the project (pure).

`database_error` reads what psycopg, SQLAlchemy or DBOS raised (a SQLAlchemy error carries psycopg's as
`orig`; DBOS chains them) and says what is wrong with the database and what to do, never the SQL, the URL's
password or a library's link. A connection that fails carries no SQLSTATE (libpq reports it as text), so
those are told apart by libpq's message. `bind_error` does the same for a port a server cannot listen on.
"""

from __future__ import annotations

import contextlib
import errno
import re
import socket
from collections.abc import Iterator

import psycopg
from psycopg.conninfo import conninfo_to_dict

from fireflow_contract.dburl import libpq_url, redact_url

MIGRATE_HINT = "run `fireflow-worker migrate` with the same database URL first"
_SCHEMA_BEHIND = re.compile(r"is at schema version (\d+), but this version of DBOS requires (\d+)")
# libpq's prefix of a failed connection: `connection failed: connection to server at "h", port 5 failed: `.
_LIBPQ_PREFIX = re.compile(r"^(connection failed: )?(connection to server (at|on) .*? failed: )?(FATAL: +)?")


def _chain(err: BaseException) -> Iterator[BaseException]:
    """`err`, then what it wraps: SQLAlchemy's `orig`, then the causes and contexts, each once."""
    seen: set[int] = set()
    pending = [err]
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending += [e for e in (getattr(current, "orig", None), current.__cause__, current.__context__) if e]


def _where(url: str | None) -> tuple[str, str, str]:
    """The server (`host:port`), the database and the user a URL names, as far as it names them."""
    parts: dict[str, str] = {}
    if url:
        with contextlib.suppress(Exception):
            parts = {k: str(v) for k, v in conninfo_to_dict(libpq_url(url)).items() if v is not None}
    server = f"{parts.get('host', 'localhost')}:{parts.get('port', '5432')}"
    return server, parts.get("dbname", "?"), parts.get("user", "?")


_PASSWORD_FAILED = re.compile(r'password authentication failed for user "([^"]*)"')
_NO_DATABASE = re.compile(r'database "([^"]*)" does not exist')
_NO_ROLE = re.compile(r'role "([^"]*)" does not exist')


def _connection_error(message: str, url: str | None, setting: str) -> str | None:
    server, _, user = _where(url)
    text = message.lower()
    if found := _PASSWORD_FAILED.search(message):
        return f"PostgreSQL at {server} refused the password of user {found.group(1)!r}: correct it in {setting}"
    if "password supplied" in text or "no password" in text:
        return f"PostgreSQL at {server} asks for a password for user {user!r}: put it in {setting}"
    if found := _NO_DATABASE.search(message):
        return (
            f"the database {found.group(1)!r} does not exist on the PostgreSQL server at {server}: create it "
            f"(CREATE DATABASE) or name an existing one in {setting}"
        )
    if found := _NO_ROLE.search(message):
        return f"PostgreSQL at {server} has no user {found.group(1)!r}: create it or correct the user in {setting}"
    if "no pg_hba.conf entry" in text:
        return (
            f"PostgreSQL at {server} accepts no connection from this host for user {user!r} (pg_hba.conf): "
            f"allow it there or connect as another user in {setting}"
        )
    if "connection refused" in text or "no such file or directory" in text:
        return (
            f"nothing accepts connections at {server} (connection refused): start PostgreSQL there or correct "
            f"the host and port in {setting}"
        )
    if "timeout expired" in text or "timed out" in text:
        return (
            f"PostgreSQL at {server} did not answer in time: check that it runs and that no firewall is in the "
            f"way, or correct the host and port in {setting}"
        )
    if "could not translate host name" in text or "name or service not known" in text:
        return f"the host name of {server} cannot be resolved: correct the host in {setting}"
    if "too many clients" in text or "remaining connection slots" in text:
        return (
            f"PostgreSQL at {server} has no connection left (max_connections): end idle clients or raise "
            "max_connections"
        )
    if "starting up" in text or "shutting down" in text or "in recovery mode" in text:
        return f"PostgreSQL at {server} is starting up or shutting down: try again once it accepts connections"
    return None


def _schema_error(err: BaseException, url: str | None) -> str | None:
    _, database, _ = _where(url)
    behind = _SCHEMA_BEHIND.search(str(err))
    if behind:
        current, required = behind.groups()
        return (
            f"the DBOS schema of database {database!r} is at version {current} and this version of DBOS needs "
            f"{required}: {MIGRATE_HINT}, or set DBOS_RUN_MIGRATIONS=true"
        )
    sqlstate = getattr(err, "sqlstate", None)
    if sqlstate in ("42P01", "3F000", "42883"):  # undefined table, schema or function
        return f"the database {database!r} has no FireFlow/DBOS schema ({_first_line(err)}): {MIGRATE_HINT}"
    return None


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return _LIBPQ_PREFIX.sub("", lines[0]) if lines else type(err).__name__


def database_error(err: BaseException, url: str | None, setting: str = "DATABASE_URL_EXECUTIONS") -> str | None:
    """One sentence for a database error, naming the cause and the fix; None: `err` is no database error.

    `setting` names where the user gives the URL (the variable, or a command-line option too).
    """
    for found in _chain(err):
        explained = _schema_error(found, url)
        if explained is not None:
            return explained
    for found in _chain(err):
        if isinstance(found, psycopg.Error):
            message = " ".join(str(found).split())
            explained = _connection_error(message, url, setting)
            if explained is None:
                server, database, _ = _where(url)
                explained = (
                    f"the database {database!r} at {server} failed the request ({_first_line(found)}): check "
                    f"{setting} and the server's log"
                )
            return redact_url(explained)
    return None


def bind_error(err: OSError, host: str, port: int, host_setting: str, port_setting: str) -> str:
    """One sentence for a server socket that could not listen on `host:port`."""
    if err.errno == errno.EADDRINUSE:
        return (
            f"port {port} on {host} is already in use by another process: set {port_setting} to a free port or end "
            "the process that holds it"
        )
    if err.errno == errno.EACCES:
        return f"this user may not listen on port {port} (below 1024): set {port_setting} to a port above 1023"
    if err.errno == errno.EADDRNOTAVAIL or isinstance(err, socket.gaierror):
        return f"{host!r} is not an address of this machine: set {host_setting} to one of its addresses or 0.0.0.0"
    return f"cannot listen on {host}:{port} ({err.strerror or err}): set {port_setting} to a free port"
