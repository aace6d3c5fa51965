"""Where a FireFlow worker's CPU per run goes beyond raw DBOS-py's, thread by thread, against one local
PostgreSQL server (127.0.0.1 only):

    .venv/bin/pip install -c .ci/constraints.txt -e '.[bench]'     # py-spy (names the threads), pinned
    .venv/bin/python -m benchmarks.thread_cpu [--runs 600] [--repeat 6] [--flow 3-python] [--burn 2000]

Three one-process pods drain the same number of held runs side by side (`measure.side_by_side`), the release
order rotating by round: the FireFlow worker, raw DBOS-py (`benchmarks/baseline_worker.py`), and raw DBOS-py
whose every step first spends `--burn` iterations of a pure Python loop (`BENCH_BURN_ITERATIONS`). Over each
drain's window every thread's CPU and context switches are read from /proc and summed by what the thread
is (named by `py-spy dump`): a run's thread, the claimer, DBOS's other threads, FireFlow's own.

The third pod calibrates the rest: a known amount of interpreter work per run (the loop, timed here in a
tight loop) against what it adds to the pod's CPU per run when fifty runs' threads share the interpreter's
lock on a busy machine. Work that holds that lock costs the worker more than its own time: the threads
waiting for it are woken and put back to sleep.

Progress goes to stderr; the markdown tables to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import measure, report
from benchmarks.baseline_worker import burn
from benchmarks.bench_worker import bench_server
from benchmarks.cpu import NO_THREAD, ThreadCounters, thread_counters, tree_pids
from benchmarks.database import Databases
from benchmarks.workload import FLOW_NAMES, PEER_STEPS, QUEUE, Kind

PY_SPY = Path(sys.executable).with_name("py-spy")
FIREFLOW, RAW, BURNED = "FireFlow worker", "raw DBOS-py", "raw DBOS-py + burn"
# What each thread is, by its name's start (its digits folded): the first that matches.
ROLES = (
    ("a run's thread (DBOS's executor pool)", ("dbos-executor-",)),
    ("claiming the queue (FireFlow's claimer, DBOS's queue thread)", (f"claim-{QUEUE}", f"queue-worker-{QUEUE}")),
    (
        "FireFlow's own threads (cancel watcher, queue depth, watchdog, health, listener watch)",
        ("cancel-watcher", "queue-depth", "machinery-watchdog", "health-server", "claim-listener"),
    ),
    ("the main thread", ("MainThread",)),
)
OTHERS = "DBOS's other threads (notifications, background jobs, its internal queue)"


def _say(message: str) -> None:
    print(f"[thread-cpu] {message}", file=sys.stderr, flush=True)


def role(thread_name: str) -> str:
    for label, prefixes in ROLES:
        if thread_name.startswith(prefixes):
            return label
    return OTHERS


def thread_names(roots: list[int]) -> dict[int, str]:
    """Each Python thread's name by its kernel id, from `py-spy dump` of every process in the trees."""
    names: dict[int, str] = {}
    for pid in tree_pids(roots):
        dumped = subprocess.run(
            [str(PY_SPY), "dump", "--json", "--pid", str(pid)], check=False, capture_output=True, text=True
        )
        if dumped.returncode != 0:
            raise RuntimeError(f"py-spy could not read process {pid}: {dumped.stderr.strip()[-300:]}")
        for thread in json.loads(dumped.stdout):
            names[int(thread["os_thread_id"])] = str(thread.get("thread_name") or "?")
    return names


@dataclass
class ThreadProbe:
    """One drain's threads over its window, summed by role (measure.WindowProbe)."""

    before: dict[int, ThreadCounters] = field(default_factory=dict)
    by_role: dict[str, ThreadCounters] = field(default_factory=dict)

    def opened(self, pids: list[int]) -> None:
        self.before = thread_counters(pids)

    def closed(self, pids: list[int]) -> None:
        after, names = thread_counters(pids), thread_names(pids)
        for tid, counters in after.items():
            label = role(re.sub(r"\d+", "N", names.get(tid, "?")))
            self.by_role[label] = self.by_role.get(label, NO_THREAD) + counters - self.before.get(tid, NO_THREAD)

    @property
    def cpu_seconds(self) -> float:
        return sum(counters.cpu_seconds for counters in self.by_role.values())


@dataclass
class Totals:
    """A setup's probes over every round, and its CPU per run in each."""

    runs: int = 0
    by_role: dict[str, ThreadCounters] = field(default_factory=dict)
    cpu_ms_per_run: list[float] = field(default_factory=list)

    def add(self, probe: ThreadProbe, runs: int) -> None:
        self.runs += runs
        self.cpu_ms_per_run.append(1000 * probe.cpu_seconds / runs)
        for label, counters in probe.by_role.items():
            self.by_role[label] = self.by_role.get(label, NO_THREAD) + counters

    def cpu_ms(self, label: str) -> float:
        """The role's CPU per run, in milliseconds."""
        return 1000 * self.by_role.get(label, NO_THREAD).cpu_seconds / self.runs

    def switches(self, label: str) -> float:
        """The role's context switches per run."""
        return self.by_role.get(label, NO_THREAD).switches / self.runs


def burn_microseconds(iterations: int, steps: int) -> float:
    """The loop's time per run (`steps` loops) in this interpreter, alone: the best of 200 tries."""
    best = float("inf")
    for _ in range(200):
        started = time.perf_counter()
        burn(iterations)
        best = min(best, time.perf_counter() - started)
    return best * steps * 1e6


def rounds(bench: measure.Bench, flow: str, runs: int, repeat: int, burn_iterations: int) -> dict[str, Totals]:
    setups: list[tuple[str, Kind, dict[str, str]]] = [
        (FIREFLOW, "fireflow", {}),
        (RAW, "raw", {}),
        (BURNED, "raw", {"BENCH_BURN_ITERATIONS": str(burn_iterations)}),
    ]
    totals = {label: Totals() for label, _, _ in setups}
    for index in range(repeat):
        order = setups[index % len(setups) :] + setups[: index % len(setups)]
        probes = [ThreadProbe() for _ in order]
        _say(f"round {index + 1}/{repeat}: {', '.join(label for label, _, _ in order)} (release order)")
        measure.side_by_side(
            bench,
            [(kind, 1) for _, kind, _ in order],
            flow,
            runs,
            envs=[env for _, _, env in order],
            probes=list(probes),
        )
        for (label, _, _), probe in zip(order, probes, strict=True):
            totals[label].add(probe, runs)
    return totals


def tables(totals: dict[str, Totals], burned_us: float) -> list[list[str]]:
    labels = [label for label, _ in ROLES] + [OTHERS]
    header = "| thread | " + " | ".join(f"{kind}: CPU ms/run | switches/run" for kind in totals) + " |"
    rows = [header, "|---|" + "---:|---:|" * len(totals)]
    for label in labels:
        cells = [f"{t.cpu_ms(label):.3f} | {t.switches(label):.1f}" for t in totals.values()]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    sums = [
        f"{sum(t.cpu_ms(label) for label in labels):.3f} | {sum(t.switches(label) for label in labels):.1f}"
        for t in totals.values()
    ]
    rows.append("| **all** | " + " | ".join(sums) + " |")
    fireflow, raw, burned = totals[FIREFLOW], totals[RAW], totals[BURNED]
    ratios = [ff / base for ff, base in zip(fireflow.cpu_ms_per_run, raw.cpu_ms_per_run, strict=True)]
    # The burn's cost in each round, against raw DBOS-py's drain beside it.
    added_us = [1000 * (b - base) for b, base in zip(burned.cpu_ms_per_run, raw.cpu_ms_per_run, strict=True)]
    median_us = statistics.median(added_us)
    summary = [
        f"- FireFlow worker / raw DBOS-py, CPU per run over each drain's own window, per round: median "
        f"{statistics.median(ratios):.3f}x ({min(ratios):.3f}-{max(ratios):.3f}, {len(ratios)} rounds).",
        f"- Calibration: {burned_us:.0f} us of pure Python per run (the loop alone, timed here) added "
        f"{median_us:.0f} us ({min(added_us):.0f} to {max(added_us):.0f}) of worker CPU per run, per round: "
        f"{median_us / burned_us:.2f}x its own time.",
    ]
    return [rows, summary]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.thread_cpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=600, help="runs each pod drains per round (default 600)")
    parser.add_argument("--repeat", type=int, default=6, help="rounds, the release order rotating (default 6)")
    parser.add_argument("--flow", choices=FLOW_NAMES, default="3-python", help="the flow (default 3-python)")
    parser.add_argument("--burn", type=int, default=2000, help="loop iterations per step of the third pod")
    args = parser.parse_args(argv)
    if not PY_SPY.exists():
        install = f"{sys.executable} -m pip install -c .ci/constraints.txt -e '.[bench]'"
        raise SystemExit(f"naming the threads needs py-spy: {install}")
    started = time.monotonic()
    log_dir = Path(tempfile.mkdtemp(prefix="fireflow-thread-cpu-"))
    server, origin = bench_server()
    _say(f"starting PostgreSQL ({origin}) on 127.0.0.1; worker logs in {log_dir}; load {report.load_average()}")
    server.start()
    load_at_start = report.load_average()
    try:
        databases = Databases(server)
        databases.prepare(("fireflow", "raw"))
        totals = rounds(measure.Bench(databases, log_dir), args.flow, args.runs, args.repeat, args.burn)
    finally:
        server.stop()
    burned_us = burn_microseconds(args.burn, PEER_STEPS[args.flow])
    command = " ".join([".venv/bin/python -m benchmarks.thread_cpu", *(sys.argv[1:] if argv is None else argv)])
    print(
        f"## CPU per run by thread, {args.flow}\n\n`{command}`: {time.monotonic() - started:.0f} s, "
        f"{os.cpu_count()} CPUs, load average {load_at_start} at the start and {report.load_average()} at the end\n"
    )
    for table in tables(totals, burned_us):
        print("\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
