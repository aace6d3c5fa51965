"""The thread-by-thread CPU benchmark's parts that need no database: /proc's per-thread counters, and what each
of the worker's threads is counted as."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

from benchmarks.cpu import ThreadCounters, thread_counters
from benchmarks.thread_cpu import BURNED, FIREFLOW, OTHERS, RAW, ROLES, ThreadProbe, Totals, role, tables

WORKER = Path(__file__).resolve().parents[2] / "worker" / "fireflow_worker"


def test_a_threads_cpu_and_waits_are_its_own() -> None:
    spent: dict[str, int] = {}
    go, done, leave = threading.Event(), threading.Event(), threading.Event()

    def busy() -> None:
        spent["tid"] = threading.get_native_id()
        go.wait()
        deadline = time.process_time() + 0.3
        while time.process_time() < deadline:
            pass
        for _ in range(5):
            time.sleep(0.001)  # each a voluntary switch
        done.set()
        leave.wait(10)  # alive until read

    worker = threading.Thread(target=busy, daemon=True)
    worker.start()
    while "tid" not in spent:
        time.sleep(0.001)
    before = thread_counters([os.getpid()])[spent["tid"]]
    go.set()
    done.wait(10)
    after = thread_counters([os.getpid()])[spent["tid"]]
    mine = thread_counters([os.getpid()])[threading.get_native_id()]
    leave.set()
    used = after - before
    assert used.cpu_seconds >= 0.1
    assert used.voluntary >= 5
    assert mine.cpu_seconds >= 0  # this thread is listed too, apart


def test_every_thread_the_worker_names_has_its_role() -> None:
    """A thread renamed in the worker must not fall silently among DBOS's threads."""
    names = set()
    for source in WORKER.glob("*.py"):
        for found in re.findall(r'name=(f?)"([a-z{}_-]+)"', source.read_text()):
            names.add(found[1].replace("{queue_name}", "fireflow-executions"))
    assert {"cancel-watcher", "claim-fireflow-executions", "queue-depth", "health-server"} <= names
    for name in names:
        assert role(name) != OTHERS, name


def test_runs_and_claims_of_both_kinds_share_a_role() -> None:
    assert role("dbos-executor-_N") == ROLES[0][0]
    assert role("claim-fireflow-executions") == role("queue-worker-fireflow-executions") == ROLES[1][0]
    assert role("Thread-N (run_notifier)") == OTHERS
    assert role("queue-worker-_dbos_internal_queue") == OTHERS


def _totals(cpu_ms_per_round: list[float], runs_thread_ms: float) -> Totals:
    totals = Totals()
    for cpu_ms in cpu_ms_per_round:
        probe = ThreadProbe(
            by_role={
                ROLES[0][0]: ThreadCounters(runs_thread_ms * 100 / 1000, 250, 40),
                OTHERS: ThreadCounters((cpu_ms - runs_thread_ms) * 100 / 1000, 10, 2),
            }
        )
        totals.add(probe, 100)
    return totals


def test_the_tables_pair_each_round_with_raw_dbos_py_beside_it() -> None:
    totals = {
        FIREFLOW: _totals([11.0, 9.9, 10.0], 9.0),
        RAW: _totals([10.0, 9.0, 10.0], 8.0),
        BURNED: _totals([10.2, 9.3, 10.6], 8.0),
    }
    by_thread, summary = tables(totals, burned_us=100.0)
    assert by_thread[2].startswith(f"| {ROLES[0][0]} | 9.000 | 2.9 | 8.000 | 2.9 |")
    assert by_thread[-1].startswith("| **all** | 10.300 | 3.0 | 9.667 | 3.0 |")
    # Per round: 1.1, 1.1, 1.0 -> median 1.100; the burn added 200, 300 and 600 us -> median 300 us, 3.00x.
    assert "median 1.100x (1.000-1.100, 3 rounds)" in summary[0]
    assert "added 300 us (200 to 600)" in summary[1]
    assert "3.00x its own time" in summary[1]
