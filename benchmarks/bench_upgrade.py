"""The pause an upgrade costs: the longest gap between two consecutive run claims while a busy pool's image
changes to one that needs a DBOS migration, with `spec.migration.strategy` Online and Offline.

On the local cluster (the Go-built control plane and the process node, tests/kube) with the operator as a
process, against one PostgreSQL; runs are enqueued every 0.2 s throughout. Repetitions are interleaved, so
machine noise hits both strategies alike. `python -m benchmarks.bench_upgrade [--repeat N]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid

from fireflow_local.postgres import LocalPostgres
from tests.kube.cluster import LocalCluster
from tests.kube.plugin import fresh_namespace
from tests.support.pools import (
    OperatorProcess,
    condition,
    create_pool,
    create_secret,
    patch_pool,
    rolled_out,
    set_schema_behind,
    wait_for_pool,
    wait_until,
)
from tests.support.upgrade_traffic import Traffic

DBOS = {"pollingIntervalMs": 50, "shutdownDrainTimeoutMs": 3000, "systemDatabasePoolSize": 5}


def upgrade_gap(cluster: LocalCluster, postgres: LocalPostgres, strategy: str) -> tuple[float, int, int]:
    """(longest gap in seconds, runs, runs not succeeded) of one upgrade of a busy pool of two."""
    with fresh_namespace(cluster, f"bench-{uuid.uuid4().hex[:8]}") as namespace:
        url = postgres.create_database(f"b_{uuid.uuid4().hex[:12]}")
        create_secret(cluster.api, namespace, url)
        create_pool(cluster.api, namespace, "pool", replicas=2, dbos=DBOS,
                    migration={"strategy": strategy, "lockTimeoutMs": 2000, "retries": 10})  # fmt: skip
        wait_for_pool(cluster.api, namespace, "pool", "ready", lambda p: condition(p, "Ready").get("status") == "True")
        traffic = Traffic(url)
        time.sleep(3)
        set_schema_behind(url)
        patch_pool(cluster.api, namespace, "pool", {"image": "fireflow-worker:2"})
        wait_for_pool(cluster.api, namespace, "pool", "rolled out", rolled_out("fireflow-worker:2"))
        time.sleep(3)
        traffic.stop()
        wait_until("runs done", lambda: not [r for r in traffic.claims().unfinished if r[1] != "LOST"])
        claims = traffic.claims()
        return claims.longest_gap_seconds, claims.runs, len(claims.unfinished)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    gaps: dict[str, list[float]] = {"Online": [], "Offline": []}
    failed = {"Online": 0, "Offline": 0}
    with LocalPostgres(max_connections=300) as postgres:
        cluster = LocalCluster().start()
        try:
            cluster.apply_crds()
            operator = OperatorProcess(cluster).start()
            try:
                for _ in range(args.repeat):
                    for strategy, found in gaps.items():
                        gap, runs, not_ok = upgrade_gap(cluster, postgres, strategy)
                        found.append(gap)
                        failed[strategy] += not_ok
                        print(f"  {strategy}: longest claim gap {gap:.2f} s over {runs} runs, {not_ok} not succeeded")
            finally:
                operator.stop()
        finally:
            cluster.stop()
    print(f"load average at the end: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| strategy | longest gap between two claims, median (min-max) | runs not succeeded |")
    print("|---|---:|---:|")
    for strategy, values in gaps.items():
        print(f"| {strategy} | {statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f}) "
              f"| {failed[strategy]} |")  # fmt: skip
    ratio = statistics.median(gaps["Offline"]) / max(statistics.median(gaps["Online"]), 1e-9)
    print(f"Offline / Online: {ratio:.1f}x")


if __name__ == "__main__":
    main()
