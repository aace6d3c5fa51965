"""The side-by-side table of the worker benchmark: ratios per release order, and both orders together."""

from __future__ import annotations

from benchmarks.cpu import KernelShare
from benchmarks.database import Counters
from benchmarks.measure import SIDE_BY_SIDE, SharedWindow, Throughput
from benchmarks.report import Results, pairs_table


def _drain(kind: str, released: int, shared_ms: float, processes: int = 1) -> Throughput:
    return Throughput(
        kind=kind,  # type: ignore[arg-type]
        flow="3-python",
        pods=1,
        processes=processes,
        runs=100,
        seconds=1.0,
        enqueue_seconds=0.1,
        per_worker={},
        worker_cpu_seconds=shared_ms / 10,
        server_cpu_seconds=0.0,
        load=Counters(1000, 300),
        rss_mib=70.0,
        worker_kernel=KernelShare(0.01, 100),
        variant=f"{SIDE_BY_SIDE}{released}",
        shared=SharedWindow(cpu_seconds=shared_ms / 1000 * 50, runs_done=50),
    )


def test_should_read_each_release_order_apart_and_both_together() -> None:
    results = Results()
    # FireFlow released first: 1.10 and 1.12; raw DBOS-py released first: 1.00 and 1.02.
    for ff_first, ratio in ((True, 1.10), (True, 1.12), (False, 1.00), (False, 1.02)):
        ff, raw = _drain("fireflow", 0 if ff_first else 1, 10 * ratio), _drain("raw", 1 if ff_first else 0, 10)
        results.pairs.append((ff, raw))
    row = pairs_table(results)[2].split(" | ")
    assert row[4] == "1.110 (1.100-1.120)"  # FireFlow released first
    assert row[5] == "1.010 (1.000-1.020)"  # raw DBOS-py released first
    assert row[6] == f"**{(1.11 * 1.01) ** 0.5:.3f}**"  # the geometric mean of the two medians
    assert row[7] == "1.060 (1.000-1.120)"  # whole drains, every round


def test_should_say_n_a_without_both_orders() -> None:
    results = Results()
    results.pairs.append((_drain("fireflow", 0, 11.0), _drain("raw", 1, 10.0)))
    assert pairs_table(results)[2].split(" | ")[6] == "**n/a**"


def test_should_pair_each_fireflow_pod_size_apart() -> None:
    results = Results()
    for processes, ratio in ((1, 1.10), (2, 0.90)):
        for released in (0, 1):
            ff, raw = _drain("fireflow", released, 10 * ratio, processes), _drain("raw", 1 - released, 10)
            results.pairs.append((ff, raw))
    rows = [row.split(" | ") for row in pairs_table(results)[2:]]
    assert [(row[0], row[6]) for row in rows] == [
        ("| 3-python", "**1.100**"),
        ("| 3-python, FireFlow 2 processes", "**0.900**"),
    ]
