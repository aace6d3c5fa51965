"""The operator's connections to pools' databases: one small pool per database, kept between reconciles (I/O).

Opening a connection costs a TCP (often TLS) handshake and an authentication, so the operator keeps its
connections open and shares them between the reconciles of every pool on one database: a pool of
`CONNECTIONS_PER_DATABASE`, never more, whoever asks and however many reconciles of that database run at once
(they wait their turn, for at most a few statement timeouts). DBOS's client, which the operator's recovery and
version changes use, runs on the same pool (`dbos_engine`), so it opens nothing of its own either. A connection
is checked with one round trip before it is reused (a server restart or a dropped connection opens a new one),
and a database's pool is closed once unused for `IDLE_SECONDS`.

A pool serves one database as one role with one password (`database_key`): pools whose URLs differ only in
options the operator sets itself share it; a different password gets its own, so that a wrong one is still
found out. The connection budget counts the pool: the operator's connections to the server's other databases
are others' usage to a pool's probe, and each database's own are reserved (capacity/budget.py,
OPERATOR_CONNECTION).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import sqlalchemy
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from sqlalchemy import exc as sa_exc
from sqlalchemy.pool import QueuePool

from fireflow_operator.api.names import OPERATOR_APPLICATION_NAME
from fireflow_operator.database.dsn import libpq_dsn

CONNECTIONS_PER_DATABASE = 1  # enough: the database's facts are read once per resync for all its pools
DEFAULT_TIMEOUT_SECONDS = 5  # the operator's setting's default, for a caller that names none
IDLE_SECONDS = 300.0  # longer than any resync interval, so a quiet database keeps its connection
# Parameters the operator sets on its own connections: URLs that differ only in these reach the same database.
_OWN_PARAMETERS = frozenset({"application_name", "fallback_application_name", "connect_timeout", "options"})
Connection = psycopg.Connection[tuple[object, ...]]


class DatabaseUnreachableError(Exception):
    """No connection could be opened (network, DNS, credentials, a missing database)."""


class DatabaseQueryError(Exception):
    """A connection was opened, then a query failed (permissions, a damaged schema)."""


def database_key(url: str) -> str:
    """Which pool of connections serves `url`: its libpq parameters but those the operator sets (pure)."""
    dsn = libpq_dsn(url)
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return dsn  # fails to connect, with libpq's own message
    return make_conninfo(**{key: str(value) for key, value in sorted(params.items()) if key not in _OWN_PARAMETERS})


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


@dataclass
class _Pool:
    engine: sqlalchemy.Engine
    used: float  # monotonic seconds


class DatabasePools:
    def __init__(self, idle_seconds: float = IDLE_SECONDS, size: int = CONNECTIONS_PER_DATABASE) -> None:
        self.idle_seconds = idle_seconds
        self.size = size
        self._pools: dict[str, _Pool] = {}
        self._lock = threading.Lock()

    def engine(self, url: str, timeout_seconds: int) -> sqlalchemy.Engine:
        """The database's pool as a SQLAlchemy engine (for DBOS's client): at most `size` connections, a
        caller waits up to three statement timeouts for one."""
        key = database_key(url)
        now = time.monotonic()
        with self._lock:
            idle = [k for k, p in self._pools.items() if k != key and now - p.used > self.idle_seconds]
            expired = [self._pools.pop(k).engine for k in idle]
            kept = self._pools.get(key)
            if kept is None:
                kept = self._pools[key] = _Pool(self._build(url, timeout_seconds), now)
            kept.used = now
        for engine in expired:
            engine.dispose()
        return kept.engine

    def _build(self, url: str, timeout: int) -> sqlalchemy.Engine:
        dsn = libpq_dsn(url)

        def connect() -> Connection:
            return psycopg.connect(
                dsn,
                connect_timeout=timeout,
                application_name=OPERATOR_APPLICATION_NAME,
                options=f"-c statement_timeout={timeout * 1000}",
            )

        return sqlalchemy.create_engine(
            "postgresql+psycopg://",
            creator=connect,
            poolclass=QueuePool,
            pool_size=self.size,
            max_overflow=0,
            pool_timeout=3 * timeout,
            pool_pre_ping=True,
        )

    @contextlib.contextmanager
    def connection(self, url: str, timeout_seconds: int) -> Iterator[Connection]:
        """An autocommit connection of the database's pool, given back when the caller is done (raises
        DatabaseUnreachableError when none can be opened or none was free in time)."""
        engine = self.engine(url, timeout_seconds)
        try:
            pooled = engine.raw_connection()
        except sa_exc.TimeoutError:
            raise DatabaseUnreachableError(
                f"the operator's {self.size} connection(s) to this database stayed busy for {3 * timeout_seconds} s"
            ) from None
        except sa_exc.DBAPIError as err:
            raise DatabaseUnreachableError(_one_line(err.orig or err)) from None
        except psycopg.Error as err:  # from the connect function, which SQLAlchemy does not wrap
            raise DatabaseUnreachableError(_one_line(err)) from None
        conn: Connection = pooled.driver_connection  # type: ignore[assignment]
        conn.autocommit = True
        try:
            yield conn
        except BaseException:
            pooled.invalidate()  # a connection in an unknown state is closed, not handed to the next caller
            raise
        finally:
            if pooled.is_valid:
                if not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                    conn.autocommit = False  # as SQLAlchemy (DBOS's client) expects it
                else:
                    pooled.invalidate()
            pooled.close()  # back to the pool (or, invalidated, closed)


POOLS = DatabasePools()  # one per operator process, shared by every pool's reconcile and finalizer


def database_connection(url: str, timeout_seconds: int) -> contextlib.AbstractContextManager[Connection]:
    return POOLS.connection(url, timeout_seconds)


def dbos_engine(url: str, timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS) -> sqlalchemy.Engine:
    """The engine to give DBOS's client (`system_database_engine`): the database's pool (as the probe made it,
    with its timeouts, when it did); the client's destroy() leaves it open."""
    return POOLS.engine(url, timeout_seconds)
