"""Database and socket errors read as one sentence naming the cause and the fix (pure).

The exceptions are built as psycopg, SQLAlchemy and DBOS raise them, with libpq's message texts; the CLI
tests in tests/worker/test_cli_errors.py meet the same errors from a real server.
"""

from __future__ import annotations

import errno
import socket

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import errors as pg_errors

from fireflow_contract.explain import bind_error, database_error

URL = "postgresql://fireflow:s3cr3t-pw@db.example:6543/runs"
PREFIX = 'connection failed: connection to server at "10.0.0.5", port 6543 failed: '


def _wrapped(orig: Exception, statement: str = "SELECT 1") -> sa.exc.StatementError:
    """What SQLAlchemy raises around psycopg's error: the statement and a link in its text."""
    return sa.exc.DBAPIError.instance(statement, {}, orig, psycopg.Error)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            PREFIX + 'FATAL:  password authentication failed for user "fireflow"',
            "PostgreSQL at db.example:6543 refused the password of user 'fireflow': correct it in "
            "DATABASE_URL_EXECUTIONS",
        ),
        (
            PREFIX + 'FATAL:  database "runs" does not exist',
            "the database 'runs' does not exist on the PostgreSQL server at db.example:6543: create it "
            "(CREATE DATABASE) or name an existing one in DATABASE_URL_EXECUTIONS",
        ),
        (
            PREFIX + 'FATAL:  role "fireflow" does not exist',
            "PostgreSQL at db.example:6543 has no user 'fireflow': create it or correct the user in "
            "DATABASE_URL_EXECUTIONS",
        ),
        (
            PREFIX + "Connection refused\n\tIs the server running on that host and accepting TCP/IP connections?",
            "nothing accepts connections at db.example:6543 (connection refused): start PostgreSQL there or "
            "correct the host and port in DATABASE_URL_EXECUTIONS",
        ),
        (
            'connection failed: connection to server at "10.0.0.5", port 6543 failed: timeout expired',
            "PostgreSQL at db.example:6543 did not answer in time: check that it runs and that no firewall is in "
            "the way, or correct the host and port in DATABASE_URL_EXECUTIONS",
        ),
        (
            'connection failed: could not translate host name "db.example" to address: Name or service not known',
            "the host name of db.example:6543 cannot be resolved: correct the host in DATABASE_URL_EXECUTIONS",
        ),
        (
            PREFIX + "FATAL:  sorry, too many clients already",
            "PostgreSQL at db.example:6543 has no connection left (max_connections): end idle clients or raise "
            "max_connections",
        ),
        (
            PREFIX + 'FATAL:  no pg_hba.conf entry for host "10.0.0.9", user "fireflow", database "runs"',
            "PostgreSQL at db.example:6543 accepts no connection from this host for user 'fireflow' (pg_hba.conf): "
            "allow it there or connect as another user in DATABASE_URL_EXECUTIONS",
        ),
    ],
    ids=["password", "no-database", "no-role", "refused", "timeout", "unknown-host", "full", "pg-hba"],
)
def test_should_name_cause_and_fix_of_a_failed_connection_as_raised_bare_or_by_sqlalchemy(
    message: str, expected: str
) -> None:
    bare = psycopg.OperationalError(message)
    assert database_error(bare, URL) == expected
    assert database_error(_wrapped(bare), URL) == expected


def test_should_name_the_migration_for_an_unmigrated_database_and_never_show_the_statement() -> None:
    orig = pg_errors.UndefinedTable('relation "dbos.workflow_status" does not exist\nLINE 1: INSERT INTO dbos.wor...')
    statement = "INSERT INTO dbos.workflow_status (workflow_uuid, status, name) VALUES (%(a)s, %(b)s, %(c)s)" * 5
    said = database_error(_wrapped(orig, statement), URL)
    assert said == (
        "the database 'runs' has no FireFlow/DBOS schema (relation \"dbos.workflow_status\" does not exist): "
        "run `fireflow-worker migrate` with the same database URL first"
    )
    missing_schema = pg_errors.InvalidSchemaName('schema "fireflow" does not exist')
    assert "run `fireflow-worker migrate`" in (database_error(missing_schema, URL) or "")


def test_should_read_dbos_schema_version_refusal_through_its_cause_chain() -> None:
    try:
        try:
            raise RuntimeError("System database is at schema version 0, but this version of DBOS requires 125")
        except RuntimeError as inner:
            raise ValueError("DBOS failed to launch") from inner
    except ValueError as outer:
        said = database_error(outer, URL)
    assert said == (
        "the DBOS schema of database 'runs' is at version 0 and this version of DBOS needs 125: run "
        "`fireflow-worker migrate` with the same database URL first, or set DBOS_RUN_MIGRATIONS=true"
    )


def test_should_say_what_failed_in_one_line_for_an_unknown_database_error_without_the_password() -> None:
    orig = pg_errors.InsufficientPrivilege(f"permission denied for table flows (via {URL})\nDETAIL: more")
    said = database_error(_wrapped(orig), URL, "DATABASE_URL_EXECUTIONS or --database-url")
    assert said is not None
    assert said.startswith("the database 'runs' at db.example:6543 failed the request (permission denied for table")
    assert said.endswith("check DATABASE_URL_EXECUTIONS or --database-url and the server's log")
    assert "s3cr3t-pw" not in said and "\n" not in said and "sqlalche.me" not in said


def test_should_leave_errors_that_are_not_the_database_to_the_caller() -> None:
    assert database_error(ValueError("bad input"), URL) is None
    assert database_error(KeyError("x"), None) is None


def test_should_name_the_default_server_when_the_url_names_none() -> None:
    said = database_error(psycopg.OperationalError("connection failed: Connection refused"), "postgresql:///runs")
    assert said is not None and said.startswith("nothing accepts connections at localhost:5432")


@pytest.mark.parametrize(
    ("err", "expected"),
    [
        (
            OSError(errno.EADDRINUSE, "Address already in use"),
            "port 8080 on 0.0.0.0 is already in use by another process: set FIREFLOW_HEALTH_PORT to a free port or "
            "end the process that holds it",
        ),
        (
            PermissionError(errno.EACCES, "Permission denied"),
            "this user may not listen on port 8080 (below 1024): set FIREFLOW_HEALTH_PORT to a port above 1023",
        ),
        (
            OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address"),
            "'0.0.0.0' is not an address of this machine: set FIREFLOW_HEALTH_HOST to one of its addresses or 0.0.0.0",
        ),
        (
            socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
            "'0.0.0.0' is not an address of this machine: set FIREFLOW_HEALTH_HOST to one of its addresses or 0.0.0.0",
        ),
    ],
    ids=["in-use", "privileged", "not-an-address", "unknown-name"],
)
def test_should_name_cause_and_fix_of_a_port_that_cannot_be_bound(err: OSError, expected: str) -> None:
    assert bind_error(err, "0.0.0.0", 8080, "FIREFLOW_HEALTH_HOST", "FIREFLOW_HEALTH_PORT") == expected
