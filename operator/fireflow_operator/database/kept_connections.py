"""The operator's connections to pools' databases, kept between reconciles (I/O).

Opening a connection costs a TCP (often TLS) handshake and an authentication, and a reconcile needs several
queries: so the operator keeps at most one idle connection per database URL and hands it to the next
reconcile of any pool on that database, instead of opening two per reconcile. A kept connection is checked
with one round trip before it is reused (a server restart or a dropped connection opens a new one), and closed
once unused for `IDLE_SECONDS`. The connection budget counts it: the operator's connections to the server's
other databases are others' usage to a pool's probe, and each pool's own is reserved (capacity/budget.py,
OPERATOR_CONNECTION).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import psycopg

from fireflow_operator.api.names import OPERATOR_APPLICATION_NAME
from fireflow_operator.database.dsn import libpq_dsn

IDLE_SECONDS = 300.0  # longer than any resync interval, so a quiet database keeps its one connection
Connection = psycopg.Connection[tuple[object, ...]]


class DatabaseUnreachableError(Exception):
    """No connection could be opened (network, DNS, credentials, a missing database)."""


class DatabaseQueryError(Exception):
    """A connection was opened, then a query failed (permissions, a damaged schema)."""


class KeptConnections:
    def __init__(self, idle_seconds: float = IDLE_SECONDS) -> None:
        self.idle_seconds = idle_seconds
        self._idle: dict[tuple[str, int], tuple[Connection, float]] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def connection(self, url: str, timeout_seconds: int) -> Iterator[Connection]:
        """An autocommit connection with short timeouts, kept for reuse when the caller is done with it
        cleanly (raises DatabaseUnreachableError when none can be opened)."""
        key = (libpq_dsn(url), timeout_seconds)
        conn = self._take(key) or self._open(key)
        clean = False
        try:
            yield conn
            clean = True
        finally:
            if clean and not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                self._give_back(key, conn)
            else:
                conn.close()

    def _take(self, key: tuple[str, int]) -> Connection | None:
        with self._lock:
            kept = self._idle.pop(key, None)
            expired = self._expired()
        for old in expired:
            old.close()
        if kept is None:
            return None
        conn = kept[0]
        try:
            conn.execute("SELECT 1")
        except psycopg.Error:
            conn.close()
            return None
        return conn

    def _open(self, key: tuple[str, int]) -> Connection:
        dsn, timeout = key
        try:
            return psycopg.connect(
                dsn,
                connect_timeout=timeout,
                application_name=OPERATOR_APPLICATION_NAME,
                options=f"-c statement_timeout={timeout * 1000}",
                autocommit=True,
            )
        except psycopg.Error as err:
            raise DatabaseUnreachableError(" ".join(str(err).split())) from None

    def _give_back(self, key: tuple[str, int], conn: Connection) -> None:
        with self._lock:
            extra = self._idle.get(key)
            self._idle[key] = (conn, time.monotonic())
        if extra is not None:  # another reconcile on this database gave one back first: keep one only
            extra[0].close()

    def _expired(self) -> list[Connection]:
        """Take out the connections unused for too long (the lock is held)."""
        now = time.monotonic()
        old = [key for key, (_, used) in self._idle.items() if now - used > self.idle_seconds]
        return [self._idle.pop(key)[0] for key in old]


KEPT = KeptConnections()  # one per operator process, shared by every pool's reconcile and finalizer


def database_connection(url: str, timeout_seconds: int) -> contextlib.AbstractContextManager[Connection]:
    return KEPT.connection(url, timeout_seconds)
