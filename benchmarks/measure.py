"""The three measurements, each on a fresh database of the one benchmark server.

Timestamps are the ones DBOS keeps in `dbos.workflow_status`, in ms since the epoch: `created_at` (the
enqueue) and `started_at_epoch_ms` (the claim, surfaced as `dequeued_at`) are PostgreSQL's `now()`, i.e.
the start of the inserting or claiming transaction; `completed_at` is the worker's clock. Everything runs
on one host, so they share one clock.

- **Throughput**: the workers are started, ready and polling; the queue is held (its `dbos.queues` row's
  `worker_concurrency` set to 0: DBOS reloads that row before every poll, and a worker with no room claims
  nothing); N runs are enqueued up front, back to back, by one client (FireflowClient, or a DBOSClient for
  the baseline); then the queue is released (`worker_concurrency` back to 50) in one UPDATE. Throughput =
  N / (last `completed_at` - the release, database clock). So the client's enqueue cost, which would
  otherwise compete with the workers for the CPU and could even be the bottleneck, stays out of the
  window; it is reported separately. Every run must end in SUCCESS, none may start before the release,
  and the first and last runs' results are checked. Over the same window: CPU of the worker processes
  and of PostgreSQL, and the statements and commits the database served (the workers' alone; not the
  benchmark's own status polls). Commits are read once the workers have stopped (a backend publishes its
  commit count about once a second, and at exit), so they also hold a second or two of idle polling and
  the shutdown after the last run: per run, a slight overestimate.
- **Idle load**: one ready worker, nothing enqueued. `pg_stat_statements_reset()`, then over a window the
  delta of `sum(calls)` of `pg_stat_statements` for the database (statements/s) and of
  `pg_stat_database.xact_commit` for it (commits/s). The benchmark's own queries run in the `postgres`
  database, so they are not counted. Backends publish their commit counts about once a second, so the
  commits of a window are exact only to about a second's worth at each end.
- **Claim latency**: one ready worker; runs enqueued one at a time, each after the previous one finished
  plus a random 20-120 ms pause (so enqueues fall at random phases of the polling cycle); latency =
  `dequeued_at - created_at`. A claim transaction that began just before the enqueue committed and still
  saw the row gives a latency of a few ms below zero.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from fireflow_worker import queues as ff_queues

from benchmarks.cpu import postmaster_pid, tree_cpu_seconds
from benchmarks.database import BenchmarkError, Counters, Databases, RunWatcher
from benchmarks.procs import running_workers
from benchmarks.workload import QUEUE, WORKER_CONCURRENCY, Kind, enqueuer, expected_result

# After the queue is held: long enough for every worker to have reloaded the queue's row (one poll).
HOLD_SETTLE_SECONDS = 0.5


@dataclass(frozen=True)
class Bench:
    databases: Databases
    log_dir: Path


@dataclass(frozen=True)
class Throughput:
    kind: Kind
    workers: int
    runs: int
    seconds: float
    enqueue_seconds: float
    per_worker: dict[str, int]
    # From the release to the last run seen done: CPU of the worker processes and of PostgreSQL.
    worker_cpu_seconds: float
    server_cpu_seconds: float
    load: Counters

    @property
    def runs_per_second(self) -> float:
        return self.runs / self.seconds


@dataclass(frozen=True)
class IdleLoad:
    kind: Kind
    polling_ms: int
    queues: int
    seconds: float
    load: Counters

    @property
    def statements_per_second(self) -> float:
        return self.load.statements / self.seconds

    @property
    def commits_per_second(self) -> float:
        return self.load.commits / self.seconds


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


def throughput(bench: Bench, kind: Kind, workers: int, runs: int) -> Throughput:
    url = bench.databases.fresh(f"tp{workers}_{kind}", kind)
    server_pid = postmaster_pid(bench.databases.server.data_dir)
    with bench.databases.admin() as admin:
        with (
            running_workers(kind, url, bench.log_dir, count=workers, queues=[QUEUE]) as procs,
            RunWatcher(url) as watcher,
        ):
            watcher.set_worker_concurrency(QUEUE, 0)
            time.sleep(HOLD_SETTLE_SECONDS)
            client = enqueuer(kind, url)
            try:
                started = time.monotonic()
                ids = [client.enqueue(f"user-{index}") for index in range(runs)]
                enqueue_seconds = time.monotonic() - started
                admin.execute("SELECT pg_stat_statements_reset()")
                before = Counters.read(admin, url)
                queries_before = watcher.queries
                worker_pids = [worker.pid for worker in procs]
                worker_cpu, server_cpu = tree_cpu_seconds(worker_pids), tree_cpu_seconds([server_pid])
                released_ms = watcher.set_worker_concurrency(QUEUE, WORKER_CONCURRENCY)
                watcher.wait_all_succeeded(runs, timeout=max(120.0, runs / 2), interval=0.1)
                worker_cpu = tree_cpu_seconds(worker_pids) - worker_cpu
                server_cpu = tree_cpu_seconds([server_pid]) - server_cpu
                statements = Counters.read(admin, url).statements - before.statements
                for index in (0, runs - 1):  # the flow and the baseline compute the same thing
                    got = client.result(ids[index])
                    if got != expected_result(f"user-{index}"):
                        raise BenchmarkError(f"{kind} run {ids[index]} returned {got!r}")
            finally:
                client.close()
            ((first_started, last_completed),) = watcher.rows(
                "SELECT min(started_at_epoch_ms), max(completed_at) FROM dbos.workflow_status"
            )
            per_worker = watcher.rows("SELECT executor_id, count(*) FROM dbos.workflow_status GROUP BY 1 ORDER BY 1")
            own_commits = watcher.queries - queries_before
        # The workers and the watcher have disconnected: every backend has flushed its commit count.
        commits = Counters.read(admin, url).commits - before.commits - own_commits
    if int(first_started) < released_ms - 5:  # 5 ms: the claim stamps its transaction's start
        raise BenchmarkError(f"{kind}: a run started {released_ms - int(first_started)} ms before the release")
    return Throughput(
        kind=kind,
        workers=workers,
        runs=runs,
        seconds=(int(last_completed) - released_ms) / 1000,
        enqueue_seconds=enqueue_seconds,
        per_worker={str(executor): int(count) for executor, count in per_worker},
        worker_cpu_seconds=worker_cpu,
        server_cpu_seconds=server_cpu,
        load=Counters(statements, commits),
    )


def idle_load(bench: Bench, kind: Kind, polling_ms: int, queue_count: int, window: float) -> IdleLoad:
    served = [QUEUE] if queue_count == 1 else list(ff_queues.ALL_QUEUES)
    url = bench.databases.fresh(f"idle{polling_ms}_{queue_count}q_{kind}", kind)
    with (
        running_workers(kind, url, bench.log_dir, polling_ms=polling_ms, queues=served),
        bench.databases.admin() as admin,
    ):
        # Let the connection pool and the statistics of the start-up settle before the window opens.
        time.sleep(1.0)
        admin.execute("SELECT pg_stat_statements_reset()")
        before = Counters.read(admin, url)
        started = time.monotonic()
        time.sleep(window)
        load = Counters.read(admin, url) - before
        seconds = time.monotonic() - started
    return IdleLoad(kind=kind, polling_ms=polling_ms, queues=queue_count, seconds=seconds, load=load)


def claim_latency(bench: Bench, kind: Kind, runs: int, polling_ms: int = 50) -> ClaimLatency:
    url = bench.databases.fresh(f"claim_{kind}", kind)
    rng = random.Random(20240601)
    with (
        running_workers(kind, url, bench.log_dir, polling_ms=polling_ms, queues=[QUEUE]),
        RunWatcher(url) as watcher,
    ):
        client = enqueuer(kind, url)
        try:
            for index in range(runs):
                client.enqueue(f"user-{index}")
                watcher.wait_all_succeeded(index + 1, timeout=60.0, interval=0.01)
                time.sleep(rng.uniform(0.02, 0.12))
        finally:
            client.close()
        rows = watcher.rows("SELECT started_at_epoch_ms - created_at FROM dbos.workflow_status ORDER BY created_at")
    return ClaimLatency(kind=kind, polling_ms=polling_ms, latencies_ms=[int(row[0]) for row in rows])
