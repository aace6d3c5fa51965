"""The measurements, each on a fresh database of the one benchmark server.

Timestamps are the ones DBOS keeps in `dbos.workflow_status`, in ms since the epoch: `created_at` (the
enqueue) and `started_at_epoch_ms` (the claim) are PostgreSQL's clock, `completed_at` the worker's. Everything
runs on one host, so they share one clock.

- **Throughput**: N runs are enqueued held (application version `held`, which no worker claims) before the
  workers start; once they are ready and polling, one transaction releases them (their version becomes the
  workers', plus the enqueue notification any enqueue sends). Throughput = N / (last `completed_at` - the
  release). The enqueue cost stays out of the window (reported apart). Every run must end in SUCCESS, none may
  start before the release, the first and last runs' results are checked. Over the same window: CPU of the
  worker processes (every process of a pod) and of PostgreSQL, the statements (`pg_stat_statements`) and
  commits (`pg_stat_database.xact_commit`, read once the workers stopped: a backend publishes its count about
  once a second and at exit, so they include a second or two of idle polling and the shutdown: per run, a
  slight overestimate for every kind), and the workers' resident memory at the end.
- **Idle load**: ready workers, nothing enqueued; over a window, the statements/s and commits/s of their
  database. The benchmark's own queries run in the `postgres` database and are not counted.
- **Claim latency**: one ready worker; runs enqueued one at a time, each after the previous one finished plus a
  random 20-120 ms pause (enqueues fall at random phases of the polling cycle); latency = `started_at_epoch_ms
  - created_at`. A claim transaction that began just before the enqueue committed and still saw the row
  gives a latency of a few ms below zero.
"""

from __future__ import annotations

import contextlib
import math
import random
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psycopg

from benchmarks.cpu import KernelShare, postmaster_pid, tree_cpu_seconds, tree_kernel_share
from benchmarks.database import BenchmarkError, Counters, Databases, FunctionTime, RunWatcher, StatementShare
from benchmarks.procs import running_workers
from benchmarks.workload import QUEUE, WORKER_CONCURRENCY, Kind, decode_output, enqueuer, expected_result, slug

APP_VERSION = "1.0.0"  # every kind's workers run this version (procs.py)
# A side-by-side drain's variant, with its place in the release order (0: released first).
SIDE_BY_SIDE = "side by side, released #"


@dataclass(frozen=True)
class Bench:
    databases: Databases
    log_dir: Path


@dataclass(frozen=True)
class SharedWindow:
    """What a drain did while every drain beside it was still draining: its worker CPU, and its work in runs
    (runs claimed, steps recorded and runs ended, each run counting `2 + its steps` such units)."""

    cpu_seconds: float
    runs_done: float

    @property
    def cpu_ms_per_run(self) -> float:
        return 1000 * self.cpu_seconds / self.runs_done


@dataclass(frozen=True)
class Throughput:
    kind: Kind
    flow: str  # workload.FLOW_NAMES
    pods: int
    processes: int  # per pod
    runs: int
    seconds: float
    enqueue_seconds: float
    per_worker: dict[str, int]
    worker_cpu_seconds: float
    server_cpu_seconds: float
    load: Counters
    rss_mib: float
    # The workers' threads: system CPU and context switches over the window.
    worker_kernel: KernelShare
    concurrency: int = WORKER_CONCURRENCY  # DBOS_WORKER_CONCURRENCY of each process
    variant: str = ""  # what else was set, e.g. "live events"
    # The window's statements by query, and the database's PL/pgSQL functions (with track_functions = 'pl').
    by_statement: tuple[StatementShare, ...] = ()
    functions: tuple[FunctionTime, ...] = ()
    # Side by side: this drain's CPU and work until the first of the drains ended (see `side_by_side`).
    shared: SharedWindow | None = None

    @property
    def runs_per_second(self) -> float:
        return self.runs / self.seconds

    @property
    def cpu_ms_per_run(self) -> float:
        return 1000 * self.worker_cpu_seconds / self.runs


@dataclass(frozen=True)
class IdleLoad:
    kind: Kind
    variant: str  # what else was set, e.g. "TS worker defaults"
    polling_ms: int
    queues: int
    workers: int
    seconds: float
    load: Counters
    rss_mib: float

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


# Given the pids of a drain's workers, a context around its window (a profiler attached to them, say).
Observer = Callable[[list[int]], AbstractContextManager[Any]]


class WindowProbe(Protocol):
    """Reads something of a drain's worker processes when its window opens and again when it closes, while
    they still run (e.g. each thread's CPU: `benchmarks/thread_cpu.py`)."""

    def opened(self, pids: list[int]) -> None: ...

    def closed(self, pids: list[int]) -> None: ...


class _Drain:
    """One drain in the phases a measurement goes through: its fresh database and held runs; its workers (and
    watcher, and observer) entered on a stack; its window opened, the runs released, the window closed; and,
    once the workers have stopped, its figures. A side-by-side measurement interleaves two drains' phases."""

    def __init__(
        self,
        bench: Bench,
        kind: Kind,
        flow: str,
        pods: int,
        processes: int,
        runs: int,
        concurrency: int,
        *,
        events: str | None = None,
        variant: str = "",
        extra_env: dict[str, str] | None = None,
        beside: bool = False,
        probe: WindowProbe | None = None,
    ) -> None:
        self.probe = probe
        self.bench, self.kind, self.flow, self.pods, self.processes = bench, kind, flow, pods, processes
        self.runs, self.concurrency, self.events, self.variant = runs, concurrency, events, variant
        self.extra_env = {**(extra_env or {}), "DBOS_WORKER_CONCURRENCY": str(concurrency)}
        label = f"tp{slug(flow)}{pods}x{processes}_{kind}"
        self.url = bench.databases.fresh(label, kind, keep_others=beside)
        self.ids: list[str] = []
        self.enqueue_seconds = 0.0
        self.shared: SharedWindow | None = None

    def enqueue(self) -> None:
        client = enqueuer(self.kind, self.url, self.flow, self.events)
        try:
            started = time.monotonic()
            self.ids = [client.enqueue(f"user-{index}", held=True) for index in range(self.runs)]
            self.enqueue_seconds = time.monotonic() - started
        finally:
            client.close()

    def start(self, stack: contextlib.ExitStack, observe: Observer | None) -> None:
        """The workers, ready and polling, and the watcher, until `stack` closes."""
        self.procs = stack.enter_context(
            running_workers(
                self.kind,
                self.url,
                self.bench.log_dir,
                count=self.pods,
                queues=[QUEUE],
                processes=self.processes,
                extra_env=self.extra_env,
            )
        )
        self.pids = [worker.pid for worker in self.procs]
        self.watcher = stack.enter_context(RunWatcher(self.url))
        stack.enter_context((observe or _unobserved)(self.pids))

    def open_window(self, admin: psycopg.Connection[Any]) -> None:
        """Counters before the release; `pg_stat_statements_reset()` was called once for every drain."""
        self.server_pid = postmaster_pid(self.bench.databases.server.data_dir)
        self.before = Counters.read(admin, self.url)
        self.queries_before = self.watcher.queries
        self.worker_cpu = tree_cpu_seconds(self.pids)
        self.server_cpu = tree_cpu_seconds([self.server_pid])
        self.kernel = tree_kernel_share(self.pids)
        if self.probe is not None:
            self.probe.opened(self.pids)

    def release(self) -> None:
        self.released_ms = self.watcher.release(APP_VERSION, QUEUE)

    def progress(self) -> tuple[float, int, int]:
        """(worker CPU seconds since the release, units of work done: runs claimed + steps + runs ended, steps)."""
        cpu = tree_cpu_seconds(self.pids) - self.worker_cpu
        ((claimed, ended, steps),) = self.watcher.rows(
            "SELECT count(*) FILTER (WHERE status <> 'ENQUEUED'), count(*) FILTER (WHERE status = 'SUCCESS'), "
            "(SELECT count(*) FROM dbos.operation_outputs) FROM dbos.workflow_status"
        )
        return cpu, int(claimed) + int(ended) + int(steps), int(steps)

    def close_window(self, admin: psycopg.Connection[Any]) -> None:
        """The window's figures, read as soon as the drain has ended, while its workers still run."""
        self.worker_cpu = tree_cpu_seconds(self.pids) - self.worker_cpu
        self.kernel = tree_kernel_share(self.pids) - self.kernel
        self.server_cpu = tree_cpu_seconds([self.server_pid]) - self.server_cpu
        self.statements = Counters.read(admin, self.url).statements - self.before.statements
        self.by_statement = StatementShare.read(admin, self.url)
        self.rss = sum(worker.rss_mib() for worker in self.procs)
        for index in (0, self.runs - 1):  # every kind computes the same thing
            # DBOS-py 3.4 keeps outputs in a table of their own; DBOS-TS in the status row.
            output_of = "s.output" if self.kind == "ts" else "o.output"
            joined = "" if self.kind == "ts" else "LEFT JOIN dbos.workflow_output o USING (workflow_uuid)"
            ((status, output, serialization),) = self.watcher.rows(
                f"SELECT s.status, {output_of}, s.serialization FROM dbos.workflow_status s {joined} "
                f"WHERE s.workflow_uuid = '{self.ids[index]}'"
            )
            got = decode_output(output, serialization)
            if got != expected_result(self.flow, f"user-{index}"):
                raise BenchmarkError(f"{self.kind} run {self.ids[index]} ({status}, {serialization}) returned {got!r}")
        ((self.first_started, self.last_completed),) = self.watcher.rows(
            "SELECT min(started_at_epoch_ms), max(coalesce(completed_at, updated_at)) FROM dbos.workflow_status"
        )
        self.per_worker = self.watcher.rows(
            "SELECT executor_id, count(*) FROM dbos.workflow_status GROUP BY 1 ORDER BY 1"
        )
        self.own_commits = self.watcher.queries - self.queries_before
        if self.probe is not None:  # last: what it does (py-spy pauses the workers) is not the drain's
            self.probe.closed(self.pids)

    def result(self, admin: psycopg.Connection[Any]) -> Throughput:
        """Once the workers and the watcher have disconnected: every backend has flushed its commit count."""
        commits = Counters.read(admin, self.url).commits - self.before.commits - self.own_commits
        with psycopg.connect(self.url, autocommit=True) as conn:  # the fresh database's functions: its whole life
            functions = FunctionTime.read(conn)
        # A claim stamps its transaction's start, which may precede the release it then sees (on a busy machine
        # by tens of ms); a held run cannot be claimed before the release commits (its version is no worker's).
        if int(self.first_started) < self.released_ms - 250:
            raise BenchmarkError(
                f"{self.kind}: a run started {self.released_ms - int(self.first_started)} ms before the release"
            )
        return Throughput(
            kind=self.kind,
            flow=self.flow,
            pods=self.pods,
            processes=self.processes,
            runs=self.runs,
            seconds=(int(self.last_completed) - self.released_ms) / 1000,
            enqueue_seconds=self.enqueue_seconds,
            per_worker={str(executor): int(count) for executor, count in self.per_worker},
            worker_cpu_seconds=self.worker_cpu,
            server_cpu_seconds=self.server_cpu,
            load=Counters(self.statements, commits),
            rss_mib=self.rss,
            worker_kernel=self.kernel,
            concurrency=self.concurrency,
            variant=self.variant,
            by_statement=self.by_statement,
            functions=functions,
            shared=self.shared,
        )


def throughput(
    bench: Bench,
    kind: Kind,
    flow: str,
    pods: int,
    processes: int,
    runs: int,
    concurrency: int = WORKER_CONCURRENCY,
    *,
    events: str | None = None,
    variant: str = "",
    extra_env: dict[str, str] | None = None,
    observe: Observer | None = None,
    prepare: Callable[[str], None] | None = None,
) -> Throughput:
    """One drain of `runs` runs; `events` is a FireFlow run's event detail, `extra_env` more worker settings,
    `prepare` called with the fresh database's URL before anything is enqueued (a variant of its schema)."""
    drain = _Drain(
        bench, kind, flow, pods, processes, runs, concurrency, events=events, variant=variant, extra_env=extra_env
    )
    if prepare is not None:
        prepare(drain.url)
    drain.enqueue()
    with bench.databases.admin() as admin:
        with contextlib.ExitStack() as stack:
            drain.start(stack, observe)
            admin.execute("SELECT pg_stat_statements_reset()")
            drain.open_window(admin)
            drain.release()
            drain.watcher.wait_all_succeeded(runs, timeout=max(180.0, runs / 2), interval=0.1)
            drain.close_window(admin)
        return drain.result(admin)


def side_by_side(
    bench: Bench,
    setups: list[tuple[Kind, int]],
    flow: str,
    runs: int,
    concurrency: int = WORKER_CONCURRENCY,
    *,
    envs: list[dict[str, str]] | None = None,
    probes: list[WindowProbe | None] | None = None,
) -> list[Throughput]:
    """Drains of one pod each, one per (kind, processes) of `setups` (with `envs`' variables and `probes`, by
    position, when given), each on its own fresh database, draining
    at the same time: released back to back in `setups`' order, each one's window closed when its own last run
    ends. Whatever the machine does meanwhile hits them alike, so their CPU per run pairs up far more tightly
    than that of drains minutes apart (their runs/s, sharing the cores, is no pod's throughput).

    The drain that ends first had the others beside it all along; the others end alone, at less cost per run.
    So each drain's `shared` window also counts its CPU and its work (in runs, its unfinished ones in part)
    until the first drain ended: the comparison over one window, whoever ends first."""
    drains = [
        _Drain(
            bench,
            kind,
            flow,
            1,
            processes,
            runs,
            concurrency,
            variant=f"{SIDE_BY_SIDE}{index}",
            beside=index > 0,
            extra_env=envs[index] if envs else None,
            probe=probes[index] if probes else None,
        )
        for index, (kind, processes) in enumerate(setups)
    ]
    for drain in drains:
        drain.enqueue()
    with bench.databases.admin() as admin:
        with contextlib.ExitStack() as stack:
            for drain in drains:
                drain.start(stack, None)
            admin.execute("SELECT pg_stat_statements_reset()")
            for drain in drains:
                drain.open_window(admin)
            for drain in drains:
                drain.release()
            pending, deadline = list(drains), time.monotonic() + max(180.0, len(drains) * runs / 2)
            at_first_end: list[tuple[float, int, int]] = []
            while pending:
                ended = [drain for drain in pending if drain.watcher.all_ended(drain.runs)]
                if ended and not at_first_end:
                    at_first_end = [drain.progress() for drain in drains]
                for drain in ended:
                    drain.close_window(admin)
                    pending.remove(drain)
                if pending and time.monotonic() > deadline:
                    raise BenchmarkError(f"runs not finished side by side: {[d.watcher.statuses() for d in pending]}")
                time.sleep(0.05)
            for drain, (cpu, units, _) in zip(drains, at_first_end, strict=True):
                # Every run of a drain records the same number of steps: its units per run, once all ended.
                steps_per_run = drain.progress()[2] / runs
                drain.shared = SharedWindow(cpu, units / (2 + steps_per_run))
        return [drain.result(admin) for drain in drains]


def _unobserved(_pids: list[int]) -> AbstractContextManager[Any]:
    return contextlib.nullcontext()


def idle_load(
    bench: Bench,
    kind: Kind,
    served: list[str],
    window: float,
    *,
    polling_ms: int = 50,
    workers: int = 1,
    variant: str = "",
    extra_env: dict[str, str] | None = None,
) -> IdleLoad:
    url = bench.databases.fresh(f"idle{polling_ms}_{len(served)}q{workers}w_{kind}", kind)
    with (
        running_workers(
            kind, url, bench.log_dir, count=workers, polling_ms=polling_ms, queues=served, extra_env=extra_env
        ) as procs,
        bench.databases.admin() as admin,
    ):
        # Let the connection pools and the statistics of the start-up settle before the window opens.
        time.sleep(2.0)
        admin.execute("SELECT pg_stat_statements_reset()")
        before = Counters.read(admin, url)
        started = time.monotonic()
        time.sleep(window)
        load = Counters.read(admin, url) - before
        seconds = time.monotonic() - started
        rss = sum(worker.rss_mib() for worker in procs) / workers
    return IdleLoad(
        kind=kind,
        variant=variant,
        polling_ms=polling_ms,
        queues=len(served),
        workers=workers,
        seconds=seconds,
        load=load,
        rss_mib=rss,
    )


def claim_latency(bench: Bench, kind: Kind, runs: int, polling_ms: int = 50) -> ClaimLatency:
    url = bench.databases.fresh(f"claim_{kind}", kind)
    rng = random.Random(20240601)
    with (
        running_workers(kind, url, bench.log_dir, polling_ms=polling_ms, queues=[QUEUE]),
        RunWatcher(url) as watcher,
    ):
        client = enqueuer(kind, url, "1-node")
        try:
            for index in range(runs):
                client.enqueue(f"user-{index}")
                watcher.wait_all_succeeded(index + 1, timeout=60.0, interval=0.01)
                time.sleep(rng.uniform(0.02, 0.12))
        finally:
            client.close()
        rows = watcher.rows("SELECT started_at_epoch_ms - created_at FROM dbos.workflow_status ORDER BY created_at")
    return ClaimLatency(kind=kind, polling_ms=polling_ms, latencies_ms=[int(row[0]) for row in rows])
