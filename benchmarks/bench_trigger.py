"""The cost of the `fireflow_workflow_output` trigger (worker/fireflow_worker/schema.py), which copies a run's
output and error into `dbos.workflow_status` for `@dbos-inc/dbos-sdk` 4.x: the FireFlow worker draining runs
with the trigger and without, in one run against one local PostgreSQL (127.0.0.1 only), the two alternating
round after round so that machine noise hits both alike.

    .venv/bin/python -m benchmarks.bench_trigger [--runs 800] [--repeat 5] [--flow 1-node]

A first drain, not counted, warms the server and the worker's imports up (the first drain of a run is much
slower whichever variant it is). Per variant, the median over its drains (a drain stalled by a neighbour of
a shared machine moves a mean, not a median) of: the time PostgreSQL spent in the statement with which DBOS-py
ends a run (its status UPDATE and output upsert in one statement, the trigger's UPDATE running inside it),
from `pg_stat_statements`; the drain's runs/s (measure.throughput: one pod of one process); statements and
commits per run. Each with its ratio, with / without. Progress goes to stderr, the markdown table to stdout.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from benchmarks import measure, report
from benchmarks.bench_worker import bench_server
from benchmarks.database import Databases
from benchmarks.workload import FLOW_NAMES

VARIANTS = ("with the trigger", "without")
# DBOS-py 3.4's statement that writes a run's outcome: `WITH updated AS (UPDATE ...), stored AS (INSERT INTO
# dbos.workflow_output ...)`, the one the trigger fires in.
OUTCOME_STATEMENT = "%INSERT INTO dbos.workflow_output%"


@dataclass
class Drains:
    """One variant's drains, one value per drain of each measure."""

    outcome_ms: list[float] = field(default_factory=list)  # DBOS's outcome statement, mean ms per run end
    runs_per_second: list[float] = field(default_factory=list)
    statements_per_run: list[float] = field(default_factory=list)
    commits_per_run: list[float] = field(default_factory=list)


def _say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _drop_trigger(url: str) -> None:
    """The database as it would be without the trigger (the worker reinstalls its objects only when their
    version, on another trigger, differs)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER fireflow_workflow_output ON dbos.workflow_output")


def _outcome_time(databases: Databases, url: str) -> tuple[int, float]:
    """(calls, total ms) of DBOS's outcome statement in the database since the drain's reset."""
    with databases.admin() as admin:
        row = admin.execute(
            "SELECT coalesce(sum(s.calls), 0), coalesce(sum(s.total_exec_time), 0) FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s AND s.query LIKE %s",
            (url.rsplit("/", 1)[1], OUTCOME_STATEMENT),
        ).fetchone()
    assert row is not None
    return int(row[0]), float(row[1])


def _round(bench: measure.Bench, drains: dict[str, Drains] | None, variant: str, flow: str, runs: int) -> None:
    """One drain of `variant`, added to `drains` (None: a warm-up, not counted)."""
    made: list[str] = []

    def prepare(url: str) -> None:
        made.append(url)
        if variant == "without":
            _drop_trigger(url)

    t = measure.throughput(bench, "fireflow", flow, 1, 1, runs, prepare=prepare)
    calls, ms = _outcome_time(bench.databases, made[0])
    if calls < runs:
        raise SystemExit(f"{variant}: DBOS's outcome statement ran {calls} times for {runs} runs: not found")
    if drains is None:
        _say(f"warm-up drain: {t.runs_per_second:.1f} runs/s (not counted)")
        return
    drain = drains[variant]
    drain.outcome_ms.append(ms / calls)
    drain.runs_per_second.append(t.runs_per_second)
    drain.statements_per_run.append(t.load.statements / t.runs)
    drain.commits_per_run.append(t.load.commits / t.runs)
    _say(
        f"{variant}: {t.runs_per_second:.1f} runs/s, outcome statement {ms / calls:.3f} ms, "
        f"{t.load.statements / t.runs:.1f} statements/run (load {report.load_average()})"
    )


def _table(drains: dict[str, Drains]) -> list[str]:
    on, off = drains[VARIANTS[0]], drains[VARIANTS[1]]
    rows = [
        ("DBOS's outcome statement, ms per run end", on.outcome_ms, off.outcome_ms, 3),
        ("drain, runs/s", on.runs_per_second, off.runs_per_second, 1),
        ("statements per run", on.statements_per_run, off.statements_per_run, 2),
        ("commits per run", on.commits_per_run, off.commits_per_run, 2),
    ]
    lines = [
        "| median over the drains | with the trigger | without | ratio | each drain, with / without |",
        "|---|---:|---:|---:|---|",
    ]
    for name, with_, without, digits in rows:
        each = f"{', '.join(f'{v:.{digits}f}' for v in with_)} / {', '.join(f'{v:.{digits}f}' for v in without)}"
        a, b = statistics.median(with_), statistics.median(without)
        lines.append(f"| {name} | {a:.{digits}f} | {b:.{digits}f} | {a / b:.3f} | {each} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_trigger", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=800, help="runs per drain (default: 800)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds, each drains once per variant (default: 5)")
    parser.add_argument("--flow", choices=FLOW_NAMES, default="1-node", help="the flow drained (default: 1-node)")
    args = parser.parse_args(argv)
    log_dir = Path(tempfile.mkdtemp(prefix="fireflow-bench-trigger-"))
    started = time.monotonic()
    server, origin = bench_server()
    _say(f"starting PostgreSQL ({origin}) on 127.0.0.1; worker logs in {log_dir}; load {report.load_average()}")
    server.start()
    drains = {variant: Drains() for variant in VARIANTS}
    ok = False
    try:
        machine = report.machine(server.url(), origin, "-")
        databases = Databases(server)
        databases.prepare(("fireflow",))
        bench = measure.Bench(databases, log_dir)
        _round(bench, None, VARIANTS[0], args.flow, max(1, args.runs))
        for round_ in range(max(1, args.repeat)):
            order = VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                _round(bench, drains, variant, args.flow, max(1, args.runs))
        machine.append(("load average 1/5/15 min, at end", report.load_average()))
        ok = True
    finally:
        server.stop()
        if not ok:
            _say(f"failed; worker logs kept in {log_dir}")
        else:
            shutil.rmtree(log_dir, ignore_errors=True)
    command = " ".join([".venv/bin/python -m benchmarks.bench_trigger", *(sys.argv[1:] if argv is None else argv)])
    print(f"## The cost of the workflow_output trigger\n\n`{command}`: {time.monotonic() - started:.0f} s\n")
    print("\n".join(report.machine_table(machine)), end="\n\n")
    print("\n".join(_table(drains)))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
