"""The machine the figures came from, and the markdown tables the benchmark prints: medians with min-max over
the interleaved repetitions, and ratios to DBOS-TS and to raw DBOS-py measured in the same run."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from benchmarks.measure import ClaimLatency, IdleLoad, Throughput
from benchmarks.workload import FLOW_NAMES, LABELS

PG_SETTINGS = ("server_version", "fsync", "synchronous_commit", "full_page_writes", "shared_buffers")
NOTES = (
    "- FireFlow: `fireflow-worker` (a pod of 1 or N processes) running a FireFlow flow: `1-node` (template) and"
    " `3-node` (template -> transform -> template) are pure nodes, computed in the workflow and not"
    " checkpointed; `3-python` is three effectful `python` nodes (three steps) calling the trivial functions"
    " of `benchmarks/effects.py`. raw DBOS-py: `benchmarks/baseline_worker.py`, a plain sync `@DBOS.workflow`"
    " of 1 or 3 `@DBOS.step`s calling those functions (3 for both 3-node flows), with the worker's pool"
    " setting. DBOS-TS:"
    " `benchmarks/ts_worker/worker.js`, @dbos-inc/dbos-sdk 4.27.6 configured as the TypeScript worker's env table says."
    " All: worker concurrency {concurrency} (per process), no global cap, pool 30, one queue served unless said"
    " otherwise.",
    "- Throughput: N runs enqueued held before the workers start, released in one transaction once they are"
    " ready; N / (last `completed_at` - release). CPU (all of a pod's processes), statements and commits per"
    " run: over that window. Kernel %: the workers' system CPU share of it; context switches: voluntary and"
    " involuntary, of every worker thread, per run (DBOS-py runs each workflow in a thread of its own, and each"
    " statement hands the interpreter lock over). RSS: the workers' resident memory at the end.",
    "- Side by side: a FireFlow pod of one process and raw DBOS-py, each draining the same N held runs on its"
    " own fresh database at the same time (released back to back, in an order that alternates by round). Same"
    " window: each one's CPU and work until the first of the two ended (work in runs: runs claimed, steps"
    " recorded and runs ended, a run counting 2 + its steps), so neither is measured running alone; whole"
    " drains: each one's CPU when its own last run ended. Whatever else the machine does hits both alike, so"
    " each round's ratio is read as a pair (drains minutes apart differ by more than the 5 % being measured);"
    " the drain released first costs a few % more per run even beside its own kind, so the figure to read is"
    " the geometric mean of the medians of the two release orders.",
    "- Idle load: ready workers, nothing queued; `pg_stat_statements` calls and `pg_stat_database.xact_commit`"
    ' deltas of their database over the window. "TS worker defaults": the TS worker polls fireflow-executions at'
    " DBOS_QUEUE_POLLING_INTERVAL_MS and the other queues at the SDK's default (1 s), as the TS worker configures"
    " it; FireFlow at its own defaults (claims on enqueue notifications, a safety poll every 5 s).",
    "- Claim latency: `started_at_epoch_ms - created_at` (database clock), runs enqueued one at a time at random"
    " phases of the polling cycle.",
    "- Every measurement on a fresh database; every worker a subprocess with its own executor id. PostgreSQL"
    " runs on the same 2 cores as the workers and the benchmark: the absolute figures are the machine's, the"
    " ratios (same run, interleaved) are the figures to read.",
)


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


def machine(server_url: str, postgres_origin: str, ts_sdk: str) -> list[tuple[str, str]]:
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
        ("Python / Node", f"{platform.python_version()} / {ts_sdk}"),
        ("PostgreSQL", f"{pg['server_version']} ({postgres_origin}, 127.0.0.1, on the same 2 cores)"),
        (
            "PostgreSQL settings",
            f"fsync={pg['fsync']}, synchronous_commit={pg['synchronous_commit']}, "
            f"full_page_writes={pg['full_page_writes']}, shared_buffers={pg['shared_buffers']}",
        ),
        ("dbos (Python) / @dbos-inc/dbos-sdk", f"{_version('dbos')} / 4.27.6"),
        ("load average 1/5/15 min, at start", load_average()),
    ]


@dataclass
class Results:
    throughput: list[Throughput] = field(default_factory=list)
    idle: list[IdleLoad] = field(default_factory=list)
    claims: list[ClaimLatency] = field(default_factory=list)
    # Each side-by-side measurement's drains, FireFlow's first and raw DBOS-py's second.
    pairs: list[tuple[Throughput, Throughput]] = field(default_factory=list)


def _fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _spread(values: list[float]) -> str:
    """Median, and (min-max) when there are several."""
    if not values:
        return "n/a"
    median = _fmt(statistics.median(values))
    return median if len(values) == 1 else f"{median} ({_fmt(min(values))}-{_fmt(max(values))})"


def _median(values: Iterable[float]) -> float | None:
    found = list(values)
    return statistics.median(found) if found else None


def _ratio(value: float | None, reference: float | None) -> str:
    return "n/a" if value is None or not reference else f"{value / reference:.2f}"


def _who(t: Throughput) -> str:
    label = LABELS[t.kind]
    return f"{label}, {t.processes} processes" if t.kind == "fireflow" else label


Metric = Callable[[Throughput], float]
METRICS: tuple[tuple[str, Metric], ...] = (
    ("runs/s", lambda t: t.runs_per_second),
    ("worker CPU ms/run", lambda t: t.cpu_ms_per_run),
    ("statements/run", lambda t: t.load.statements / t.runs),
    ("commits/run", lambda t: t.load.commits / t.runs),
    ("runs per worker CPU-second", lambda t: t.runs / t.worker_cpu_seconds if t.worker_cpu_seconds else 0.0),
    (
        "kernel % of worker CPU",
        lambda t: 100 * t.worker_kernel.system_seconds / t.worker_cpu_seconds if t.worker_cpu_seconds else 0.0,
    ),
    ("context switches/run", lambda t: t.worker_kernel.switches / t.runs),
)


def _group(results: Results, flow: str, pods: int) -> dict[tuple[str, int], list[Throughput]]:
    groups: dict[tuple[str, int], list[Throughput]] = {}
    for t in results.throughput:
        if (t.flow, t.pods, t.variant) == (flow, pods, ""):
            groups.setdefault((t.kind, t.processes), []).append(t)
    return groups


def throughput_table(results: Results) -> list[str]:
    lines = [
        "| flow, pods | worker | runs/s | worker CPU ms/run | statements/run | commits/run | runs per worker "
        "CPU-s | kernel % of worker CPU | context switches/run | RSS MiB | runs/s ÷ TS | CPU/run ÷ raw | "
        "statements ÷ raw | commits ÷ raw | statements ÷ TS |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    cases = {(t.flow, t.pods) for t in results.throughput}
    for flow, pods in sorted(cases, key=lambda case: (FLOW_NAMES.index(case[0]), case[1])):
        groups = _group(results, flow, pods)
        ts = groups.get(("ts", 1), [])
        raw = groups.get(("raw", 1), [])
        for _key, measured in sorted(groups.items(), key=lambda item: _order(item[0])):
            values = [[metric(t) for t in measured] for _, metric in METRICS]
            rate, cpu, statements, commits, per_cpu, kernel, switches = values
            lines.append(
                f"| {flow}, {pods} pod{'s' if pods > 1 else ''} | {_who(measured[0])} | {_spread(rate)} | "
                f"{_spread(cpu)} | {_spread(statements)} | {_spread(commits)} | {_spread(per_cpu)} | "
                f"{_spread(kernel)} | {_spread(switches)} | "
                f"{_fmt(_median(t.rss_mib for t in measured))} | "
                f"{_ratio(_median(rate), _median(t.runs_per_second for t in ts))} | "
                f"{_ratio(_median(cpu), _median(t.cpu_ms_per_run for t in raw))} | "
                f"{_ratio(_median(statements), _median(t.load.statements / t.runs for t in raw))} | "
                f"{_ratio(_median(commits), _median(t.load.commits / t.runs for t in raw))} | "
                f"{_ratio(_median(statements), _median(t.load.statements / t.runs for t in ts))} |"
            )
    return lines


def _shared_cpu(t: Throughput) -> float:
    return t.shared.cpu_ms_per_run if t.shared is not None else t.cpu_ms_per_run


def _paired(pairs: list[tuple[Throughput, Throughput]], metric: Metric, first: str | None = None) -> list[float]:
    """FireFlow's metric over raw DBOS-py's, per pair; `first`: only the pairs where that kind was released first."""
    return [
        metric(ff) / metric(raw)
        for ff, raw in pairs
        if metric(raw) and (first is None or (ff.variant < raw.variant) == (first == "fireflow"))
    ]


def _spread3(values: list[float]) -> str:
    """A ratio's median with (min-max), to three decimals: the goals sit a few % from 1."""
    if not values:
        return "n/a"
    median = f"{statistics.median(values):.3f}"
    return median if len(values) == 1 else f"{median} ({min(values):.3f}-{max(values):.3f})"


def pairs_table(results: Results) -> list[str]:
    """Side by side: each round's ratio of FireFlow's CPU per run to raw DBOS-py's over the window both drained
    (until the first ended), by which was released first, and the geometric mean of the two orders' medians:
    the drain released first costs a few % more per run even against its own kind, so only both orders
    together are the figure to read."""
    lines = [
        "| flow, side by side | rounds | FireFlow worker CPU ms/run | raw DBOS-py CPU ms/run | CPU/run ÷ raw, "
        "FireFlow released first | raw released first | **both orders** | whole drains | user ÷ raw | system ÷ raw "
        "| context switches ÷ raw | statements ÷ raw |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    setups = {(ff.flow, ff.processes) for ff, _ in results.pairs}
    for flow, processes in sorted(setups, key=lambda setup: (FLOW_NAMES.index(setup[0]), setup[1])):
        pairs = [(ff, raw) for ff, raw in results.pairs if (ff.flow, ff.processes) == (flow, processes)]
        by_order = [_paired(pairs, _shared_cpu, "fireflow"), _paired(pairs, _shared_cpu, "raw")]
        medians = [statistics.median(found) for found in by_order if found]
        both = f"{statistics.geometric_mean(medians):.3f}" if len(medians) == len(by_order) else "n/a"
        lines.append(
            f"| {flow}{'' if processes == 1 else f', FireFlow {processes} processes'} | {len(pairs)} | "
            f"{_spread([_shared_cpu(ff) for ff, _ in pairs])} | "
            f"{_spread([_shared_cpu(raw) for _, raw in pairs])} | {_spread3(by_order[0])} | "
            f"{_spread3(by_order[1])} | **{both}** | {_spread3(_paired(pairs, lambda t: t.cpu_ms_per_run))} | "
            f"{_spread3(_paired(pairs, lambda t: t.worker_cpu_seconds - t.worker_kernel.system_seconds))} | "
            f"{_spread3(_paired(pairs, lambda t: t.worker_kernel.system_seconds))} | "
            f"{_spread3(_paired(pairs, lambda t: t.worker_kernel.switches))} | "
            f"{_spread3(_paired(pairs, lambda t: t.load.statements))} |"
        )
    return lines


def _order(key: tuple[str, int]) -> tuple[int, int]:
    kind, processes = key
    return (["fireflow", "raw", "raw-async", "ts"].index(kind), processes)


def idle_table(results: Results) -> list[str]:
    lines = [
        "| idle, one worker | worker | statements/s | commits/s | RSS MiB | statements ÷ TS | commits ÷ TS |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    singles = [i for i in results.idle if i.workers == 1 and i.variant != "fleet"]
    for queues, polling in sorted({(i.queues, i.polling_ms) for i in singles}):
        here = [i for i in singles if (i.queues, i.polling_ms) == (queues, polling)]
        ts = [i for i in here if i.kind == "ts" and i.variant in ("", "TS worker defaults")]
        ts_statements = _median(i.statements_per_second for i in ts)
        ts_commits = _median(i.commits_per_second for i in ts)
        for kind, variant in sorted({(i.kind, i.variant) for i in here}, key=lambda kv: (_order((kv[0], 1)), kv[1])):
            measured = [i for i in here if (i.kind, i.variant) == (kind, variant)]
            statements = [i.statements_per_second for i in measured]
            commits = [i.commits_per_second for i in measured]
            who = LABELS[kind] + (f" ({variant})" if variant else "")
            lines.append(
                f"| {queues} queue{'s' if queues > 1 else ''} @ {polling} ms | {who} | {_spread(statements)} | "
                f"{_spread(commits)} | {_fmt(_median(i.rss_mib for i in measured))} | "
                f"{_ratio(_median(statements), ts_statements)} | {_ratio(_median(commits), ts_commits)} |"
            )
    return lines


def fleet_table(results: Results) -> list[str]:
    fleet = [i for i in results.idle if i.variant == "fleet"]
    if not fleet:
        return []
    lines = [
        "| idle workers (4 queues, defaults) | worker | statements/s | commits/s | per replica: statements/s "
        "| per replica: commits/s |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for workers in sorted({i.workers for i in fleet}):
        for kind in sorted({i.kind for i in fleet}, key=lambda k: _order((k, 1))):
            measured = [i for i in fleet if (i.workers, i.kind) == (workers, kind)]
            if not measured:
                continue
            statements = _median(i.statements_per_second for i in measured) or 0.0
            commits = _median(i.commits_per_second for i in measured) or 0.0
            lines.append(
                f"| {workers} | {LABELS[kind]} | {_fmt(statements)} | {_fmt(commits)} | "
                f"{_fmt(statements / workers)} | {_fmt(commits / workers)} |"
            )
    return lines


def claim_table(results: Results) -> list[str]:
    lines = [
        "| claim latency, idle worker | polling ms | runs | p50 ms | p99 ms | mean ms | max ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for c in sorted(results.claims, key=lambda c: _order((c.kind, 1))):
        lines.append(
            f"| {LABELS[c.kind]} | {c.polling_ms} | {len(c.latencies_ms)} | {c.percentile(50):.0f} | "
            f"{c.percentile(99):.0f} | {c.mean:.1f} | {max(c.latencies_ms)} |"
        )
    return lines


def machine_table(rows: list[tuple[str, str]]) -> list[str]:
    return ["| machine | |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)]
