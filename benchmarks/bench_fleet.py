"""What one operator costs per pool as the fleet grows: idle CPU, memory, API requests and bytes, database
connections and transactions, reconciles (and what asked for them), status writes (and what they changed), and
the time from a spec change to the StatefulSet.

For each fleet size N: a fresh local cluster (the Go-built control plane with its audit log, and the process
node, tests/kube), one operator as a process (resync at the chart's 30 s), N pools across 5 namespaces (one
database per namespace on one PostgreSQL; `--active` of them at 1 replica, all in the first namespace, so the
other databases see the operator alone; the others at 0). Once every pool is
Ready and a resync period has passed with at most 1.2 reconciles per pool (4 periods at most), an idle window
(instruments: benchmarks/fleet.py); then K pools get a new `spec.env` value one at a time, each timed until its
StatefulSet's template carries it (polled every 20 ms).
`python -m benchmarks.bench_fleet [--pools 10 50 200] [--window 60] [--changes 20] [--doc docs/benchmarks-fleet.md]`
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes.client import AppsV1Api, CoreV1Api, CustomObjectsApi

from benchmarks.fleet import (
    OPERATOR_APPLICATIONS,
    LogTail,
    new_connections,
    operator_bytes,
    read_process,
    read_transactions,
    read_url,
    reconcile_requests,
    reconciles,
    response_bytes,
    status_writes,
)
from fireflow_local.postgres import LocalPostgres
from fireflow_operator.api.model import GROUP, PLURAL, VERSION
from fireflow_operator.api.names import statefulset_name
from tests.kube import rawapi
from tests.kube.cluster import LocalCluster, wait_for_service_account
from tests.kube.controlplane import OPERATOR_USER
from tests.support.pools import QUICK_DBOS, OperatorProcess, condition, create_pool, create_secret, patch_pool

NAMESPACES = 5
MARK = "FLEET_BENCH_MARK"  # the env value the spec changes set
DOC_HEADER = "# The operator at fleet scale: measured cost per pool\n"


@dataclass
class Fleet:
    pools: int
    ready_seconds: float = 0.0
    quiet_seconds: float | None = None  # from Ready until a resync period had ~1 reconcile per pool; None: never
    window_seconds: float = 0.0
    cpu_seconds: float = 0.0
    rss_mib: float = 0.0
    requests: int = 0
    mutating: int = 0
    kinds: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    written: Counter[str] = field(default_factory=Counter)  # "verb resource namespace/name" of mutating requests
    response_bytes: float = 0.0
    connections: int = 0
    other_connections: int = 0
    transactions: int = 0  # on every database of the fleet
    quiet_transactions: int = 0  # on the databases of pools at 0 replicas only: the operator's
    quiet_pools: int = 0  # the pools on those databases
    reconciles: float = 0.0
    triggers: Counter[str] = field(default_factory=Counter)  # reconciles asked for, by what asked
    status_fields: Counter[str] = field(default_factory=Counter)  # what the window's status writes changed
    latencies: list[float] = field(default_factory=list)

    def per_pool_minute(self, value: float, pools: int | None = None) -> float:
        return value / (pools or self.pools) / (self.window_seconds / 60)

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[max(1, min(len(ordered), math.ceil(p / 100 * len(ordered)))) - 1]


def _database(size: int, index: int) -> str:
    return f"fleet{size}_{index}"


def _namespaces(cluster: LocalCluster, postgres: LocalPostgres, size: int) -> list[str]:
    core = CoreV1Api(cluster.api)
    names = [f"fleet-{index}" for index in range(NAMESPACES)]
    for index, namespace in enumerate(names):
        rawapi.call(core.create_namespace, {"metadata": {"name": namespace}})
        wait_for_service_account(core, namespace)
        create_secret(cluster.api, namespace, postgres.create_database(_database(size, index)))
    return names


def _pool_names(size: int, namespaces: list[str]) -> list[tuple[str, str]]:
    return [(namespaces[index % NAMESPACES], f"pool-{index:03d}") for index in range(size)]


def _active(index: int, active: int) -> bool:
    """The first `active` pools of the first namespace run a worker; the other databases see the operator only."""
    return index % NAMESPACES == 0 and index // NAMESPACES < active


def _wait_ready(cluster: LocalCluster, namespaces: list[str], size: int, timeout: float) -> None:
    custom = CustomObjectsApi(cluster.api)
    deadline = time.monotonic() + timeout
    while True:
        ready = sum(
            condition(pool, "Ready").get("status") == "True"
            for namespace in namespaces
            for pool in rawapi.call(custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL)["items"]
        )
        if ready == size:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{ready} of {size} pools Ready after {timeout:.0f} s")
        time.sleep(2)


def _wait_quiet(operator: OperatorProcess, size: int, resync: float, periods: int = 4) -> float | None:
    """Seconds from now until a resync period had at most 1.2 reconciles per pool (the timer's one, plus a few
    events): the roll-outs' aftermath (Jobs and their pods ending) is worked off. None if it never was."""
    url = f"http://127.0.0.1:{operator.environment['FIREFLOW_OPERATOR_METRICS_PORT']}/metrics"
    started = time.monotonic()
    for _ in range(periods):
        before = reconciles(read_url(url))
        time.sleep(resync)
        if reconciles(read_url(url)) - before <= 1.2 * size:
            return round(time.monotonic() - started)
    return None


def _idle_window(
    fleet: Fleet, cluster: LocalCluster, operator: OperatorProcess, postgres: LocalPostgres, window: float
) -> None:
    audit = cluster.control_plane.audit
    assert audit is not None and operator.process is not None
    apiserver_metrics = f"{cluster.control_plane.server}/metrics"
    tls = cluster.control_plane.admin_ssl_context()
    operator_metrics = f"http://127.0.0.1:{operator.environment['FIREFLOW_OPERATOR_METRICS_PORT']}/metrics"
    databases = [_database(fleet.pools, index) for index in range(NAMESPACES)]
    before = read_url(operator_metrics)
    sizes_before, reconciles_before, triggers_before = (
        response_bytes(read_url(apiserver_metrics, tls)),
        reconciles(before),
        reconcile_requests(before),
    )
    xacts_before = read_transactions(postgres.url(), databases)
    usage_before, log, operator_log, since, started = (
        read_process(operator.process.pid),
        LogTail(postgres.log_path),
        LogTail(operator.log_path),
        datetime.now(UTC),
        time.monotonic(),
    )
    time.sleep(window)
    until, fleet.window_seconds = datetime.now(UTC), time.monotonic() - started
    usage = read_process(operator.process.pid)
    fleet.cpu_seconds, fleet.rss_mib = usage.cpu_seconds - usage_before.cpu_seconds, usage.rss_mib
    xacts = {
        name: count - xacts_before.get(name, 0) for name, count in read_transactions(postgres.url(), databases).items()
    }
    fleet.transactions = sum(xacts.values())
    fleet.quiet_transactions = sum(xacts.get(name, 0) for name in databases[1:])
    fleet.quiet_pools = sum(1 for index in range(fleet.pools) if index % NAMESPACES)
    opened = new_connections(log.read())
    fleet.connections = sum(n for name, n in opened.items() if name in OPERATOR_APPLICATIONS)
    fleet.other_connections = sum(opened.values()) - fleet.connections
    after = read_url(operator_metrics)
    fleet.reconciles = reconciles(after) - reconciles_before
    fleet.triggers = reconcile_requests(after) - triggers_before
    fleet.status_fields = status_writes(operator_log.read())
    sizes_after = response_bytes(read_url(apiserver_metrics, tls))
    sizes = {key: value - sizes_before.get(key, 0.0) for key, value in sizes_after.items()}
    everyone = audit.requests(since, until)
    own = [r for r in everyone if r.user == OPERATOR_USER]
    fleet.requests, fleet.mutating = len(own), sum(r.mutating for r in own)
    fleet.kinds = Counter((r.verb, r.resource, r.code) for r in own)
    fleet.written = Counter(f"{r.verb} {r.resource} {r.namespace}/{r.name}" for r in own if r.mutating)
    fleet.response_bytes = operator_bytes(sizes, everyone, OPERATOR_USER)


def _env_of(statefulset: Any) -> dict[str, str]:
    containers = statefulset.spec.template.spec.containers
    return {e.name: e.value for c in containers for e in c.env or [] if e.value is not None}


def _spec_changes(
    cluster: LocalCluster, pools: list[tuple[str, str]], changes: int, timeout: float = 120.0
) -> list[float]:
    apps = AppsV1Api(cluster.api)
    step = max(1, len(pools) // changes)
    latencies: list[float] = []
    for number, (namespace, name) in enumerate(pools[::step][:changes]):
        value = f"change-{number}"
        started = time.monotonic()
        patch_pool(cluster.api, namespace, name, {"env": [{"name": MARK, "value": value}]})
        while _env_of(apps.read_namespaced_stateful_set(statefulset_name(name), namespace)).get(MARK) != value:
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"{namespace}/{name}: the StatefulSet did not follow the spec in {timeout:.0f} s")
            time.sleep(0.02)
        latencies.append(time.monotonic() - started)
    return latencies


def measure(postgres: LocalPostgres, size: int, args: argparse.Namespace) -> Fleet:
    fleet = Fleet(size)
    cluster = LocalCluster(audit=True).start()
    try:
        cluster.apply_crds()
        namespaces = _namespaces(cluster, postgres, size)
        operator = OperatorProcess(cluster, FIREFLOW_OPERATOR_RESYNC_SECONDS=str(args.resync)).start()
        try:
            started = time.monotonic()
            pools = _pool_names(size, namespaces)
            for index, (namespace, name) in enumerate(pools):
                replicas = 1 if _active(index, args.active) else 0
                create_pool(cluster.api, namespace, name, replicas=replicas, dbos=QUICK_DBOS)
            _wait_ready(cluster, namespaces, size, timeout=300 + 10 * size)
            fleet.ready_seconds = time.monotonic() - started
            print(f"  {size} pools Ready after {fleet.ready_seconds:.0f} s", flush=True)
            fleet.quiet_seconds = _wait_quiet(operator, size, args.resync)
            print(f"  quiet after {fleet.quiet_seconds or 'never, measured anyway, after'} s more", flush=True)
            _idle_window(fleet, cluster, operator, postgres, args.window)
            fleet.latencies = _spec_changes(cluster, pools, args.changes)
        finally:
            operator.stop()
    finally:
        cluster.stop()
    return fleet


ROWS: tuple[tuple[str, str, Any], ...] = (
    ("operator CPU, ms per pool per minute", "{:.0f}", lambda f: f.per_pool_minute(1000 * f.cpu_seconds)),
    ("operator CPU, % of one core", "{:.1f}", lambda f: 100 * f.cpu_seconds / f.window_seconds),
    ("operator RSS, MiB (at the end of the window)", "{:.0f}", lambda f: f.rss_mib),
    ("RSS per pool, MiB", "{:.2f}", lambda f: f.rss_mib / f.pools),
    ("API requests per pool per minute", "{:.2f}", lambda f: f.per_pool_minute(f.requests)),
    ("mutating API requests per pool per minute", "{:.2f}", lambda f: f.per_pool_minute(f.mutating)),
    ("API response bytes per pool per minute (GET/LIST)", "{:,.0f}", lambda f: f.per_pool_minute(f.response_bytes)),
    ("new database connections per pool per minute", "{:.2f}", lambda f: f.per_pool_minute(f.connections)),
    (
        "database transactions per pool per minute, every database",
        "{:.1f}",
        lambda f: f.per_pool_minute(f.transactions),
    ),
    (
        "database transactions per pool per minute, databases without workers (the operator's)",
        "{:.2f}",
        lambda f: f.per_pool_minute(f.quiet_transactions, f.quiet_pools),
    ),
    ("reconciles per pool per minute", "{:.2f}", lambda f: f.per_pool_minute(f.reconciles)),
    ("spec change -> StatefulSet, p50, s", "{:.2f}", lambda f: f.percentile(50)),
    ("spec change -> StatefulSet, p99, s", "{:.2f}", lambda f: f.percentile(99)),
)


def table(measured: list[Fleet]) -> list[str]:
    """One column per fleet size, then the ratio of each larger size to the smallest."""
    fleets = sorted(measured, key=lambda f: f.pools)
    first, larger = fleets[0], fleets[1:]
    ratios = "".join(f" ratio {f.pools} / {first.pools} |" for f in larger)
    lines = [
        f"| idle, per pool | {' | '.join(f'{f.pools} pools' for f in fleets)} |{ratios}",
        "|---|" + "---:|" * (len(fleets) + len(larger)),
    ]
    blank = " |" * len(larger)
    for label, fmt, value in ROWS:
        low = value(first)
        shown = "".join(f" {value(f) / low:.2f}x |" if low else " - |" for f in larger)
        lines.append(f"| {label} | {' | '.join(fmt.format(value(f)) for f in fleets)} |{shown}")
    lines.append(
        f"| time until every pool was Ready, s | {' | '.join(f'{f.ready_seconds:.0f}' for f in fleets)} |{blank}"
    )
    quiet = " | ".join("never" if f.quiet_seconds is None else f"{f.quiet_seconds:.0f}" for f in fleets)
    lines.append(f"| then until a resync period had <= 1.2 reconciles per pool, s | {quiet} |{blank}")
    return lines


def details(fleets: list[Fleet]) -> list[str]:
    lines = []
    for fleet in fleets:
        kinds = ", ".join(f"{verb} {resource} {code}: {n}" for (verb, resource, code), n in fleet.kinds.most_common(8))
        triggers = ", ".join(f"{trigger} {n}" for trigger, n in sorted(fleet.triggers.items())) or "none"
        lines.append(
            f"- {fleet.pools} pools, {fleet.window_seconds:.0f} s: {fleet.requests} operator requests ({kinds}); "
            f"{fleet.connections} operator database connections, {fleet.other_connections} of others (workers, Jobs); "
            f"{fleet.transactions} database transactions ({fleet.quiet_transactions} without workers); "
            f"reconciles asked for: {triggers}"
        )
        if fleet.written:
            objects = ", ".join(f"{what}: {n}" for what, n in fleet.written.most_common(6))
            lines.append(f"  - written by the operator ({len(fleet.written)} objects, the most written): {objects}")
        if fleet.status_fields:
            fields = ", ".join(f"{path}: {n}" for path, n in fleet.status_fields.most_common(8))
            lines.append(f"  - status fields those writes changed: {fields}")
    return lines


def report(fleets: list[Fleet], args: argparse.Namespace, seconds: float) -> list[str]:
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        *table(fleets),
        "",
        *details(fleets),
        "",
        f"Taken {datetime.now(UTC):%Y-%m-%d %H:%M} UTC in {seconds:.0f} s; "
        f"{len(os.sched_getaffinity(0))} CPUs, load average at the end {load}; window {args.window:.0f} s, "
        f"resync {args.resync} s, {args.active} pools at 1 replica, {args.changes} spec changes per size "
        f"(nearest rank: with fewer than 100 changes, p99 is the slowest).",
    ]


def write_doc(path: Path, lines: list[str]) -> None:
    """Replace what follows the marker (the figures of the last run); keep what precedes it."""
    marker = "<!-- figures -->"
    text = path.read_text() if path.exists() else DOC_HEADER
    head = text.split(marker)[0] if marker in text else text
    path.write_text(f"{head.rstrip()}\n\n{marker}\n{chr(10).join(lines)}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, nargs="+", default=[10, 50, 200], help="fleet sizes, run in this order")
    parser.add_argument("--window", type=float, default=60.0, help="seconds of the idle window")
    parser.add_argument("--changes", type=int, default=20, help="pools whose spec is changed, one at a time")
    parser.add_argument("--active", type=int, default=3, help="pools at 1 replica (the others at 0)")
    parser.add_argument("--resync", type=int, default=30, help="the operator's resync seconds (chart default 30)")
    parser.add_argument("--doc", type=Path, help="also write the figures to this markdown file (after each size)")
    args = parser.parse_args()
    fleets: list[Fleet] = []
    started = time.monotonic()
    with LocalPostgres(max_connections=300, settings={"log_connections": "on"}) as postgres:
        for size in args.pools:
            print(f"fleet of {size} pools", flush=True)
            fleets.append(measure(postgres, size, args))
            lines = report(fleets, args, time.monotonic() - started)
            print("\n".join(lines), flush=True)
            if args.doc is not None:  # a long run that is cut short still leaves the sizes it finished
                write_doc(args.doc, lines)


if __name__ == "__main__":
    main()
