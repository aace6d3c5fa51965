"""The three measurements, each on a fresh database of the one benchmark server.

Definitions (all timestamps are the ones DBOS stores in `dbos.workflow_status`, in ms since the epoch:
`created_at` and `started_at_epoch_ms` (surfaced as `dequeued_at`) are stamped by PostgreSQL's `now()`,
`completed_at` by the worker's clock; everything runs on one host, so they share one clock):

- **Throughput**: the workers are started, ready and polling before anything is enqueued. Then N runs are
  enqueued back to back from one client thread. Throughput = N / (last `completed_at` - first
  `created_at`): from the first enqueue until the last run is SUCCESS. Every run must end in SUCCESS.
- **Idle load**: one ready worker, nothing enqueued. `pg_stat_statements_reset()`, then over a window the
  delta of `sum(calls)` of `pg_stat_statements` for the database (statements/s) and of
  `pg_stat_database.xact_commit` for it (commits/s). The benchmark's own queries run in the `postgres`
  database, so they are not counted.
- **Claim latency**: one ready worker; runs enqueued one at a time, each after the previous one finished
  plus a random 20-120 ms pause; latency = `dequeued_at - created_at` of each run.
"""

from __future__ import annotations

import math
import random
import statistics
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from fireflow_worker import queues as ff_queues
from fireflow_worker.local_postgres import LocalPostgres

from benchmarks.cpu import postmaster_pid, tree_cpu_seconds
from benchmarks.procs import migrate, running_workers
from benchmarks.workload import KINDS, QUEUE, Kind, enqueuer, expected_result

TERMINAL = ("SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")


class BenchmarkError(RuntimeError):
    """A measurement could not be taken (a run failed, a worker died, a timeout)."""


class Bench:
    """What every measurement needs: the server, where worker logs go, and one migrated template database per
    kind. Each measurement gets a fresh database copied from its kind's template (`CREATE DATABASE ...
    TEMPLATE`), so the migration runs once per kind rather than once per measurement."""

    def __init__(self, server: LocalPostgres, log_dir: Path) -> None:
        self.server = server
        self.log_dir = log_dir
        self._templates: dict[Kind, str] = {}

    def prepare(self) -> None:
        with psycopg.connect(self.server.url(), autocommit=True) as admin:
            # Its view lives in the database the benchmark queries from; it reports every database.
            admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        for kind in KINDS:
            name = f"bench_template_{kind}"
            migrate(kind, self.server.create_database(name))
            self._templates[kind] = name

    def fresh_database(self, label: str, kind: Kind) -> str:
        """A new database, migrated the way `kind` is deployed."""
        name = f"bench_{label}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(self.server.url(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self._templates[kind]}"')
        return self.server.url(name)


@dataclass(frozen=True)
class Throughput:
    kind: Kind
    workers: int
    runs: int
    seconds: float
    enqueue_seconds: float
    per_worker: dict[str, int]
    # CPU of the worker processes and of PostgreSQL between the first enqueue and the last run seen done.
    worker_cpu_seconds: float
    server_cpu_seconds: float

    @property
    def runs_per_second(self) -> float:
        return self.runs / self.seconds


@dataclass(frozen=True)
class IdleLoad:
    kind: Kind
    polling_ms: int
    queues: int
    seconds: float
    statements: int
    commits: int

    @property
    def statements_per_second(self) -> float:
        return self.statements / self.seconds

    @property
    def commits_per_second(self) -> float:
        return self.commits / self.seconds


@dataclass(frozen=True)
class ClaimLatency:
    kind: Kind
    polling_ms: int
    latencies_ms: list[int]

    def percentile(self, p: float) -> float:
        """Nearest-rank percentile (p in 0..100) of the measured latencies."""
        ordered = sorted(self.latencies_ms)
        rank = max(1, min(len(ordered), math.ceil(p / 100 * len(ordered))))
        return float(ordered[rank - 1])

    @property
    def mean(self) -> float:
        return statistics.fmean(self.latencies_ms)


def _statuses(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute("SELECT status, count(*) FROM dbos.workflow_status GROUP BY status").fetchall()
    return {str(status): int(count) for status, count in rows}


def _wait_all_terminal(conn: psycopg.Connection[Any], runs: int, timeout: float, interval: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        counts = _statuses(conn)
        if sum(counts.get(status, 0) for status in TERMINAL) >= runs:
            if counts.get("SUCCESS", 0) != runs:
                raise BenchmarkError(f"not every run succeeded: {counts}")
            return
        if time.monotonic() > deadline:
            raise BenchmarkError(f"runs not finished after {timeout:.0f} s: {counts}")
        time.sleep(interval)


def throughput(bench: Bench, kind: Kind, workers: int, runs: int) -> Throughput:
    url = bench.fresh_database(f"tp{workers}_{kind}", kind)
    with (
        running_workers(kind, url, bench.log_dir, count=workers, queues=[QUEUE]) as procs,
        psycopg.connect(url, autocommit=True) as conn,
    ):
        worker_pids = [worker.pid for worker in procs]
        server_pid = postmaster_pid(bench.server.data_dir)
        client = enqueuer(kind, url)
        try:
            worker_cpu, server_cpu = tree_cpu_seconds(worker_pids), tree_cpu_seconds([server_pid])
            started = time.monotonic()
            ids = [client.enqueue(f"user-{index}") for index in range(runs)]
            enqueue_seconds = time.monotonic() - started
            _wait_all_terminal(conn, runs, timeout=max(120.0, runs / 2), interval=0.1)
            worker_cpu = tree_cpu_seconds(worker_pids) - worker_cpu
            server_cpu = tree_cpu_seconds([server_pid]) - server_cpu
            for index in (0, runs - 1):  # the flow and the baseline compute the same thing
                got = client.result(ids[index])
                if got != expected_result(f"user-{index}"):
                    raise BenchmarkError(f"{kind} run {ids[index]} returned {got!r}")
        finally:
            client.close()
        first_created, last_completed = conn.execute(
            "SELECT min(created_at), max(completed_at) FROM dbos.workflow_status"
        ).fetchone() or (None, None)
        rows = conn.execute("SELECT executor_id, count(*) FROM dbos.workflow_status GROUP BY 1 ORDER BY 1").fetchall()
    if first_created is None or last_completed is None:
        raise BenchmarkError("no timestamps in dbos.workflow_status")
    return Throughput(
        kind=kind,
        workers=workers,
        runs=runs,
        seconds=(int(last_completed) - int(first_created)) / 1000,
        enqueue_seconds=enqueue_seconds,
        per_worker={str(executor): int(count) for executor, count in rows},
        worker_cpu_seconds=worker_cpu,
        server_cpu_seconds=server_cpu,
    )


def _counters(admin: psycopg.Connection[Any], dbname: str) -> tuple[int, int]:
    """(sum of pg_stat_statements calls, xact_commit) of one database, as the admin session sees them now."""
    admin.execute("SELECT pg_stat_clear_snapshot()")
    row = admin.execute(
        """
        SELECT (SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s WHERE s.dbid = d.datid),
               d.xact_commit
        FROM pg_stat_database d WHERE d.datname = %s
        """,
        (dbname,),
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def idle_load(bench: Bench, kind: Kind, polling_ms: int, queue_count: int, window: float) -> IdleLoad:
    served = [QUEUE] if queue_count == 1 else list(ff_queues.ALL_QUEUES)
    url = bench.fresh_database(f"idle{polling_ms}_{queue_count}q_{kind}", kind)
    dbname = url.rsplit("/", 1)[1]
    with (
        running_workers(kind, url, bench.log_dir, polling_ms=polling_ms, queues=served),
        psycopg.connect(bench.server.url(), autocommit=True) as admin,
    ):
        # Let the connection pool and the stats of the start-up settle before the window opens.
        time.sleep(1.0)
        admin.execute("SELECT pg_stat_statements_reset()")
        statements_0, commits_0 = _counters(admin, dbname)
        started = time.monotonic()
        time.sleep(window)
        statements_1, commits_1 = _counters(admin, dbname)
        seconds = time.monotonic() - started
    return IdleLoad(
        kind=kind,
        polling_ms=polling_ms,
        queues=queue_count,
        seconds=seconds,
        statements=statements_1 - statements_0,
        commits=commits_1 - commits_0,
    )


def claim_latency(bench: Bench, kind: Kind, runs: int, polling_ms: int = 50) -> ClaimLatency:
    url = bench.fresh_database(f"claim_{kind}", kind)
    rng = random.Random(20240601)
    with (
        running_workers(kind, url, bench.log_dir, polling_ms=polling_ms, queues=[QUEUE]),
        psycopg.connect(url, autocommit=True) as conn,
    ):
        client = enqueuer(kind, url)
        try:
            for index in range(runs):
                client.enqueue(f"user-{index}")
                _wait_all_terminal(conn, index + 1, timeout=60.0, interval=0.01)
                time.sleep(rng.uniform(0.02, 0.12))
        finally:
            client.close()
        rows = conn.execute(
            "SELECT started_at_epoch_ms - created_at FROM dbos.workflow_status ORDER BY created_at"
        ).fetchall()
    return ClaimLatency(kind=kind, polling_ms=polling_ms, latencies_ms=[int(row[0]) for row in rows])
