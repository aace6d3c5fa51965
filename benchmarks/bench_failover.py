"""How long a leader's death leaves the pools without an operator: two replicas on one Lease with the chart's
default timings (lease 10 s, renew deadline 7 s, retry 2 s), the leader SIGKILLed at a random moment of its
renewal period, and the time from the kill until the standby holds the Lease, until its first reconcile
finished, and until it reconciled every pool of the fleet.

On the local cluster (the Go-built control plane and the process node, tests/kube) with the operators as
processes, against one PostgreSQL; the fleet is N pools in one namespace, one at 1 replica and the others at 0.
Times come from the operators' own log lines (their UTC timestamps), not from polling.
`python -m benchmarks.bench_failover [--repeat N] [--pools N]`.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import time
import uuid
from datetime import datetime

from kubernetes.client import ApiClient

from fireflow_local.postgres import LocalPostgres
from tests.kube.cluster import LocalCluster
from tests.kube.plugin import fresh_namespace
from tests.support.leadership import LEADING, holder, replica
from tests.support.pools import (
    OperatorProcess,
    condition,
    create_pool,
    create_secret,
    get_pool,
    wait_until,
)

# `<time> INFO kopf.objects: [namespace/pool] Handler 'pool_changed' succeeded.` (logformat.TextFormatter)
RECONCILED = re.compile(
    r"^(\S+) \S+ kopf\.objects: \[[^/\]]*/([^\]]+)\] (?:Handler|Timer) '(?:pool_changed|pool_resync|child_changed)' "
    r"succeeded",
    re.MULTILINE,
)
LEADING_LINE = re.compile(rf"^(\S+) .*{LEADING}", re.MULTILINE)


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _ready(cluster: LocalCluster, namespace: str, name: str) -> bool:
    return condition(get_pool(cluster.api, namespace, name), "Ready").get("status") == "True"


def one_failover(replicas: dict[str, OperatorProcess], api: ApiClient, namespace: str, pools: int) -> tuple[float, ...]:
    """(Lease taken, first reconcile, every pool reconciled), seconds after the leader's SIGKILL."""
    leader = wait_until("a leader", lambda: holder(api, namespace))
    (standby,) = set(replicas) - {leader}
    wait_until(f"{standby} stands by", lambda: "standing by" in replicas[standby].output())
    time.sleep(random.uniform(2.0, 4.0))  # any moment of the leader's 2 s renewal period
    replicas[leader].kill()
    killed = time.time()
    wait_until(f"{standby} leads", lambda: LEADING_LINE.search(replicas[standby].output()))

    def every_pool() -> list[float] | None:
        output = replicas[standby].output()
        start = LEADING_LINE.search(output)
        assert start is not None
        first: dict[str, float] = {}
        for match in RECONCILED.finditer(output, start.start()):
            first.setdefault(match.group(2), _seconds(match.group(1)))
        return sorted(first.values()) if len(first) >= pools else None

    done = wait_until("every pool reconciled by the new leader", every_pool, timeout=300)
    output = replicas[standby].output()
    took = _seconds(LEADING_LINE.search(output).group(1))  # type: ignore[union-attr]
    replicas[leader] = replica(replicas[leader].cluster, namespace, leader)  # back, as a candidate
    return took - killed, done[0] - killed, done[-1] - killed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--pools", type=int, default=20)
    args = parser.parse_args()
    found: list[tuple[float, ...]] = []
    with LocalPostgres(max_connections=200) as postgres:
        cluster = LocalCluster().start()
        replicas: dict[str, OperatorProcess] = {}
        try:
            cluster.apply_crds()
            with fresh_namespace(cluster, f"bench-failover-{uuid.uuid4().hex[:6]}") as namespace:
                create_secret(cluster.api, namespace, postgres.create_database(f"b_{uuid.uuid4().hex[:12]}"))
                names = [f"pool-{i:03d}" for i in range(args.pools)]
                for i, name in enumerate(names):
                    create_pool(cluster.api, namespace, name, replicas=1 if i == 0 else 0)
                replicas = {name: replica(cluster, namespace, name) for name in ("operator-a", "operator-b")}
                wait_until("every pool Ready", lambda: all(_ready(cluster, namespace, name) for name in names))
                for _ in range(args.repeat):
                    found.append(one_failover(replicas, cluster.api, namespace, args.pools))
                    print("  Lease {:.1f} s, first reconcile {:.1f} s, every pool {:.1f} s".format(*found[-1]))
        finally:
            for process in replicas.values():
                process.kill()
            cluster.stop()
    print(f"load average at the end: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"| after the leader's SIGKILL ({args.pools} pools, {args.repeat} times) | median | min | max |")
    print("|---|---:|---:|---:|")
    for index, what in enumerate(("the standby holds the Lease", "its first reconcile done", "every pool reconciled")):
        values = [row[index] for row in found]
        print(f"| {what} | {statistics.median(values):.1f} s | {min(values):.1f} s | {max(values):.1f} s |")


if __name__ == "__main__":
    main()
