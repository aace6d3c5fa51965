"""The worker benchmark: the FireFlow worker against raw DBOS workflows doing the same steps, in one run
against one local PostgreSQL server (127.0.0.1 only).

    .venv/bin/python -m benchmarks.bench_worker [--quick]

It measures (definitions in `benchmarks/measure.py`), each on a fresh database and each for the FireFlow
worker and for the baseline (`benchmarks/baseline_worker.py`, a plain `@DBOS.workflow` of three
`@DBOS.step`s, registered on the same queue with the same settings):

1. completed runs/s of a 3-node flow (template -> transform -> template) with 1 and 2 worker processes;
2. the idle load of one worker on the database (statements/s, commits/s) at 50 and 200 ms polling, serving
   one queue and all four (the baseline registers the same number of queues);
3. claim latency p50/p99 (enqueue to dequeue) on an idle worker at 50 ms polling.

Every worker is a real subprocess (`fireflow-worker`, or `python -m benchmarks.baseline_worker`) with its
own executor id and `DBOS_RUN_MIGRATIONS=false`: the schema is migrated once per kind, into a template
database (`fireflow-worker migrate` for FireFlow, plain `dbos migrate` for the baseline), and each
measurement's database is a fresh copy of it. Progress goes to stderr; the markdown tables to stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from fireflow_worker.local_postgres import LocalPostgres

from benchmarks import measure, report
from benchmarks.database import Databases
from benchmarks.workload import KINDS


@dataclasses.dataclass(frozen=True)
class Plan:
    runs: int
    worker_counts: tuple[int, ...]
    idle_window: float
    polling_ms: tuple[int, ...]
    queue_counts: tuple[int, ...]
    claim_runs: int
    repeat: int = 1  # throughput measurements per configuration; the summary shows their median


FULL = Plan(runs=800, worker_counts=(1, 2), idle_window=15.0, polling_ms=(50, 200), queue_counts=(1, 4), claim_runs=100)
QUICK = Plan(runs=60, worker_counts=(1, 2), idle_window=2.0, polling_ms=(50, 200), queue_counts=(1, 4), claim_runs=10)


def _say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _throughputs(plan: Plan, bench: measure.Bench, results: report.Results) -> None:
    for workers in plan.worker_counts:
        for _ in range(plan.repeat):
            for kind in KINDS:  # alternating, so a drift of the machine hits both kinds alike
                t = measure.throughput(bench, kind, workers, plan.runs)
                results.throughput.append(t)
                _say(
                    f"throughput {kind}, {workers} worker(s): {t.runs_per_second:.1f} runs/s "
                    f"({t.runs} runs in {t.seconds:.2f} s, enqueued in {t.enqueue_seconds:.2f} s)"
                )


def _idle_loads(plan: Plan, bench: measure.Bench, results: report.Results) -> None:
    for queues in plan.queue_counts:
        for polling in plan.polling_ms:
            for kind in KINDS:
                i = measure.idle_load(bench, kind, polling, queues, plan.idle_window)
                results.idle.append(i)
                _say(
                    f"idle {kind}, {queues} queue(s), {polling} ms: {i.statements_per_second:.1f} statements/s, "
                    f"{i.commits_per_second:.1f} commits/s over {i.seconds:.1f} s"
                )


def _claim_latencies(plan: Plan, bench: measure.Bench, results: report.Results) -> None:
    for kind in KINDS:
        c = measure.claim_latency(bench, kind, plan.claim_runs)
        results.claims.append(c)
        _say(f"claim latency {kind}: p50 {c.percentile(50):.0f} ms, p99 {c.percentile(99):.0f} ms")


def _plan(args: argparse.Namespace) -> Plan:
    plan = QUICK if args.quick else FULL
    if args.runs is not None:
        plan = dataclasses.replace(plan, runs=max(1, args.runs))
    return dataclasses.replace(plan, repeat=max(1, args.repeat))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer runs, shorter windows (~2 min)")
    parser.add_argument("--runs", type=int, help="runs per throughput measurement (default: 800, quick: 60)")
    parser.add_argument("--repeat", type=int, default=1, help="throughput measurements per configuration (median)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the worker logs (kept anyway on failure)")
    args = parser.parse_args(argv)
    plan = _plan(args)
    log_dir = Path(tempfile.mkdtemp(prefix="fireflow-bench-"))
    started = time.monotonic()
    _say(f"starting PostgreSQL on 127.0.0.1; worker logs in {log_dir}")
    if os.getloadavg()[0] > len(os.sched_getaffinity(0)) / 2:
        _say(f"warning: the machine is busy (load average {report.load_average()}); the figures will be noisy")
    server = LocalPostgres(max_connections=300).start()
    results = report.Results()
    ok = False
    try:
        machine = report.machine(server.url())
        databases = Databases(server)
        databases.prepare()
        bench = measure.Bench(databases, log_dir)
        _throughputs(plan, bench, results)
        _idle_loads(plan, bench, results)
        _claim_latencies(plan, bench, results)
        machine.append(("load average 1/5/15 min, at end", report.load_average()))
        ok = True
    finally:
        server.stop()
        if not ok:
            _say(f"failed; worker logs kept in {log_dir}")
        elif not args.keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)
    command = " ".join([".venv/bin/python -m benchmarks.bench_worker", *(sys.argv[1:] if argv is None else argv)])
    mode = "quick" if args.quick else "full"
    print(f"## Worker benchmark\n\n`{command}`: {mode} run, {time.monotonic() - started:.0f} s\n")
    for table in (report.machine_table(machine), report.summary_table(results), report.details_table(results)):
        print("\n".join(table), end="\n\n")
    print("\n".join(report.NOTES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
