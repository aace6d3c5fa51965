"""The operator's database connections and probes, against a real PostgreSQL (no cluster): the pools of one
database share one probe per resync and one kept connection, whatever reconciles run at once, and DBOS's
client (which hands stranded runs back) runs on that connection instead of opening its own.

Connections are counted from the server's own `log_connections` lines, by application_name: a connection opened
and closed between two looks at pg_stat_activity would be missed there."""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TypeVar

import psycopg
import pytest

from fireflow_local.postgres import LocalPostgres
from fireflow_operator.api.names import OPERATOR_APPLICATION_NAME
from fireflow_operator.database import recovery
from fireflow_operator.database.dbprobe import Snapshots, probe_database
from fireflow_operator.database.kept_connections import DatabasePools, DatabaseUnreachableError, database_key
from fireflow_worker import migrate

T = TypeVar("T")
READERS = 8  # reconciles of pools on one database at once
_AUTHORIZED = re.compile(r"connection authorized: .*?application_name=(\S+)")


@pytest.fixture(scope="module")
def logged_postgres() -> Iterator[LocalPostgres]:
    server = LocalPostgres(max_connections=50, settings={"log_connections": "on"})
    server.start()
    yield server
    server.stop()


def _opened(server: LocalPostgres, since: int) -> Counter[str]:
    """Connections opened since byte `since` of the server's log, by application_name."""
    with server.log_path.open("rb") as log:
        log.seek(since)
        text = log.read().decode(errors="replace")
    return Counter(match[1] for match in _AUTHORIZED.finditer(text))


def _at_once(count: int, work: Callable[[], T]) -> list[T]:
    """Run `work()` in `count` threads started together; their results."""
    results: dict[int, T] = {}
    start = threading.Barrier(count)

    def run(index: int) -> None:
        start.wait()
        results[index] = work()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return [results[index] for index in range(count)]


def test_should_serve_parallel_reconciles_of_one_database_through_one_connection(
    logged_postgres: LocalPostgres,
) -> None:
    url = logged_postgres.create_database("shared_connection")
    pools = DatabasePools()
    since = logged_postgres.log_path.stat().st_size

    def backend() -> int:
        with pools.connection(url, 5) as conn:
            row = conn.execute("SELECT pg_backend_pid() FROM pg_sleep(0.05)").fetchone()
        assert row is not None
        return int(str(row[0]))

    pids = _at_once(READERS, backend)
    # The same database through a URL that differs in options the operator sets itself: the same connection.
    with pools.connection(f"{url}?application_name=other&connect_timeout=3", 5) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None and {int(str(row[0]))} == set(pids)
    assert len(set(pids)) == 1, pids
    assert _opened(logged_postgres, since) == Counter({OPERATOR_APPLICATION_NAME: 1})


def test_should_keep_a_wrong_password_apart_from_a_right_one(logged_postgres: LocalPostgres) -> None:
    url = logged_postgres.create_database("two_passwords")
    wrong = url.replace(logged_postgres.password, "not-the-password")
    assert database_key(url) != database_key(wrong)
    assert database_key(url) == database_key(f"{url}?application_name=x")
    pools = DatabasePools()
    with pools.connection(url, 5):
        pass
    with pytest.raises(DatabaseUnreachableError, match="password authentication failed"), pools.connection(wrong, 5):
        pass


def test_should_probe_a_database_once_for_the_pools_reconciled_within_a_resync(logged_postgres: LocalPostgres) -> None:
    url = logged_postgres.create_database("shared_probe")
    snapshots = Snapshots()
    taken = _at_once(READERS, lambda: snapshots.get(url, 5, max_age_seconds=30))
    assert len({id(snapshot) for snapshot in taken}) == 1  # one probe, shared by every pool's resync
    assert snapshots.get(url, 5, max_age_seconds=30) is taken[0]
    fresh = snapshots.get(url, 5, max_age_seconds=0)  # a change looks afresh
    assert fresh is not taken[0] and fresh.taken >= taken[0].taken


def test_should_hand_back_stranded_runs_through_the_operators_own_connection(logged_postgres: LocalPostgres) -> None:
    url = logged_postgres.create_database("recovery_on_the_pool")
    assert migrate.apply(url).result == "ok"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO dbos.workflow_status (workflow_uuid, status, name, executor_id, queue_name) "
            "VALUES ('run-1', 'PENDING', 'flow', 'ns.pool-3', 'fireflow-default')"
        )
    facts = probe_database(url, "fireflow", timeout_seconds=5, pool_prefixes=[])
    assert facts.pending_executors == ("ns.pool-3",)
    since = logged_postgres.log_path.stat().st_size
    assert recovery.resume_runs_of(url, "fireflow", ["ns.pool-3"], timeout_seconds=5) == 1
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT status FROM dbos.workflow_status WHERE workflow_uuid = 'run-1'").fetchone()
    assert row == ("ENQUEUED",)
    opened = _opened(logged_postgres, since)
    opened.pop("[unknown]", None)  # this test's own psycopg.connect above names no application
    assert opened == Counter(), opened  # neither a new operator connection nor one of DBOS's client's own
