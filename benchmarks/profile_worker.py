"""Where a FireFlow worker's time goes, measured against one local PostgreSQL server (127.0.0.1 only):

    .venv/bin/pip install -c .ci/constraints.txt -e '.[bench]'     # py-spy, pinned
    .venv/bin/python -m benchmarks.profile_worker [--runs 1500] [--drain-runs 600] [--repeat 2] [--only PART]
    .venv/bin/python -m benchmarks.profile_worker --summarize DIR    # the profiles' tables again, from DIR

1. `profiles`: one FireFlow worker (one process, worker concurrency 50) draining `--runs` runs of `3-node`
   (pure nodes, no step) and of `3-python` (three `python` nodes, three steps), sampled by py-spy (`record
   --threads --nonblocking`, 200 Hz, threads on a CPU only). The samples by what the thread was doing (the
   claimers, the runs' threads split into the node attempts, DBOS's steps around them, the engine and DBOS's
   start and end of a run; DBOS's other threads), by the package of the running frame, and the functions
   with the most samples; per run, the statements by query and the time PostgreSQL spent in the run-end
   trigger (`track_functions = 'pl'`). The raw stacks stay in the output directory (flamegraph input).
2. `events`: `3-node` drains with `steps` and with `live` events, interleaved.
3. `sizing`: `3-node` and `3-python` drains at worker concurrency 8, 16 and 50 with 1 and 2 processes per pod,
   interleaved: what a pod of this machine's CPUs should run.

Progress goes to stderr; the markdown tables to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from benchmarks import measure, report
from benchmarks.bench_worker import Job, bench_server
from benchmarks.database import Databases

PY_SPY = Path(sys.executable).with_name("py-spy")
SAMPLES_PER_SECOND = 200
PROFILED_FLOWS = ("3-node", "3-python")
CONCURRENCIES = (8, 16, 50)
PROCESSES = (1, 2)
TRIGGER = "fireflow.notify_workflow_terminal"
# What a run's thread (DBOS's `dbos-executor-*`) was doing, by the first of these frames found from the top of
# its stack down: (label, file suffix, function names).
RUN_PARTS = (
    ("the run's log lines (logging)", "logging/__init__.py", None),
    (
        "a node's attempt (node_step._attempt: params, the node, limits, metrics)",
        "fireflow_worker/node_step.py",
        ("_attempt",),
    ),
    ("DBOS's step around a `python` node (checkpoint read and write)", "dbos/_core.py", ("invoke_step", "run_step")),
    ("the engine (plan, inputs, pure nodes' loop, result)", "fireflow_worker/", None),
)
RUN_REST = "DBOS's start and end of the run (status rows, output)"
CLAIMING = "claiming runs (the claimers, DBOS's claim and dispatch)"


def _say(message: str) -> None:
    print(f"[profile] {message}", file=sys.stderr, flush=True)


# How each flow is sampled: threads running or ready to run (a thread waiting for a CPU on a busy machine
# counts), and the thread holding the interpreter's lock (Python's own work, not C code that released it).
SAMPLINGS = {"": (), "GIL": ("--gil",)}


def stacks_file(out: Path, flow: str, sampling: str) -> Path:
    return out / f"{flow}{'.' + sampling.lower() if sampling else ''}.stacks"


@contextlib.contextmanager
def _sampled(out: Path, options: tuple[str, ...], pids: list[int]) -> Iterator[None]:
    """py-spy recording the first worker process while the window lasts."""
    log = out.with_suffix(".log")
    args = [str(PY_SPY), "record", "--pid", str(pids[0]), "--rate", str(SAMPLES_PER_SECOND), "--nonblocking"]
    args += ["--threads", "--full-filenames", "--format", "raw", "--output", str(out), *options]
    with log.open("w") as written:
        spy = subprocess.Popen(args, stdout=written, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while "Sampling process" not in log.read_text():
        if spy.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"py-spy did not start sampling: {log.read_text()[-500:]}")
        time.sleep(0.05)
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=120)


# -- the stacks ------------------------------------------------------------------------------------------

_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


@dataclass(frozen=True)
class Frame:
    function: str
    file: str

    @staticmethod
    def parse(text: str) -> Frame:
        match = _FRAME.match(text)
        return Frame(match["function"], match["file"]) if match else Frame(text, "")

    def label(self) -> str:
        return f"{self.function} ({_short(self.file)})"


def _short(file: str) -> str:
    for marker in ("site-packages/", "/worker/", "/benchmarks/", "/lib/python3"):
        if marker in file:
            tail = file.split(marker, 1)[1]
            return ("benchmarks/" + tail) if marker == "/benchmarks/" else tail.removeprefix(".11/")
    return file


@dataclass(frozen=True)
class Stack:
    thread: str  # the thread's name
    frames: tuple[Frame, ...]  # outermost first
    samples: int


def read_stacks(path: Path) -> list[Stack]:
    """py-spy's raw output with --threads: `thread (tid): name;frame;frame... count` per line. Sampling without
    pausing the process (`--nonblocking`) may read a name half-written: its bytes are replaced."""
    stacks = []
    for line in path.read_text(errors="replace").splitlines():
        body, _, count = line.rpartition(" ")
        if not body or not count.isdigit():
            continue
        first, *rest = body.split(";")
        thread = first.split(": ", 1)[1] if ": " in first else first
        stacks.append(Stack(thread, tuple(Frame.parse(frame) for frame in rest), int(count)))
    return stacks


def role(stack: Stack) -> str:
    """What the sampled thread was doing."""
    if stack.thread.startswith("claim-"):
        return CLAIMING
    if stack.thread.startswith("dbos-executor-"):
        for label, where, functions in RUN_PARTS:
            if any(_is(frame, where, functions) for frame in stack.frames):
                return "run: " + label
        return "run: " + RUN_REST
    return f"other threads ({_thread_kind(stack.thread)})"


def _is(frame: Frame, where: str, functions: tuple[str, ...] | None) -> bool:
    """The frame is one of `functions` in a file ending with `where`, or (None) any code under `where`."""
    if functions is None:
        return where in frame.file
    return frame.file.endswith(where) and frame.function in functions


def _thread_kind(name: str) -> str:
    """`Thread-4 (run_notifier)` -> run_notifier; `dbos-background-jobs` as it is; numbered pools unnumbered."""
    if match := re.search(r"\((.+)\)", name):
        return match[1]
    return re.sub(r"[-_ ]?\d+$", "", name).strip() or "unnamed"


def package(frame: Frame) -> str:
    """The package (or standard module) a frame's code belongs to."""
    short = _short(frame.file)
    if "site-packages/" in frame.file or short.startswith(("fireflow_", "benchmarks/")):
        return short.split("/", 1)[0]
    if "/lib/python3" in frame.file:
        return "python: " + short.split("/", 1)[0].removesuffix(".py")
    return short or frame.function


def _shares(counts: Counter[str], total: int, top: int | None = None) -> list[tuple[str, float]]:
    return [(name, 100 * n / total) for name, n in counts.most_common(top)]


@dataclass(frozen=True)
class Profile:
    flow: str
    sampling: str  # a key of SAMPLINGS
    stacks: list[Stack]

    @property
    def name(self) -> str:
        return f"{self.flow}, {self.sampling}" if self.sampling else self.flow

    @property
    def samples(self) -> int:
        return sum(s.samples for s in self.stacks)

    def by_role(self) -> Counter[str]:
        found: Counter[str] = Counter()
        for stack in self.stacks:
            found[role(stack)] += stack.samples
        return found

    def by_package(self) -> Counter[str]:
        found: Counter[str] = Counter()
        for stack in self.stacks:
            if stack.frames:
                found[package(stack.frames[-1])] += stack.samples
        return found

    def by_function(self) -> Counter[str]:
        """Samples with the function anywhere on the stack (once per stack), threading's plumbing left out."""
        found: Counter[str] = Counter()
        for stack in self.stacks:
            labels = {frame.label() for frame in stack.frames if "threading.py" not in frame.file}
            for label in labels:
                found[label] += stack.samples
        return found


# -- the tables ------------------------------------------------------------------------------------------


def profile_tables(profiles: list[Profile], drains: dict[str, measure.Throughput]) -> list[list[str]]:
    """The samples' tables of every profile, and per run (the drain without `--gil`) those of every flow drained."""
    tables = []
    flows = [p.name for p in profiles]
    header = "| " + " | ".join(["share of the worker's on-CPU samples", *flows]) + " |"
    rule = "|---|" + "---:|" * len(flows)
    for title, counts in (("by what the thread did", "by_role"), ("by the running frame's package", "by_package")):
        per_flow = [getattr(p, counts)() for p in profiles]
        names = sorted(
            {name for c in per_flow for name in c}, key=lambda n: -max(c[n] / max(1, sum(c.values())) for c in per_flow)
        )
        rows = [header.replace("share of the worker's on-CPU samples", f"{title} (% of samples)"), rule]
        for name in names[:14]:
            cells = [f"{100 * c[name] / max(1, sum(c.values())):.1f}" for c in per_flow]
            rows.append(f"| {name} | " + " | ".join(cells) + " |")
        tables.append(rows)
    for p in profiles:
        rows = [f"| {p.name}: functions on the stack (% of samples) | % |", "|---|---:|"]
        rows += [f"| `{name}` | {share:.1f} |" for name, share in _shares(p.by_function(), p.samples, 25)]
        tables.append(rows)
    for flow, t in drains.items():
        rows = [
            f"| {flow}: per run ({t.runs} runs, {t.runs_per_second:.0f} runs/s, {t.cpu_ms_per_run:.2f} worker CPU "
            "ms/run) | calls/run | ms/run |",
            "|---|---:|---:|",
        ]
        for p in profiles:
            if p.flow == flow:
                share = p.by_role()[CLAIMING] / max(1, p.samples)
                rows.append(
                    f"| the claimers' share of the worker CPU ({p.sampling or 'running'} samples: "
                    f"{100 * share:.1f} %) | | {share * t.cpu_ms_per_run:.3f} (worker) |"
                )
        for fn in t.functions:
            rows.append(
                f"| trigger function `{fn.name}` (PostgreSQL) | {fn.calls / t.runs:.2f} | {fn.self_ms / t.runs:.4f} |"
            )
        for st in t.by_statement[:14]:
            rows.append(f"| `{st.query[:110]}` (PostgreSQL) | {st.calls / t.runs:.2f} | {st.exec_ms / t.runs:.4f} |")
        tables.append(rows)
    return tables


def _spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3g}"
    return f"{statistics.median(values):.3g} ({min(values):.3g}-{max(values):.3g})"


def drain_table(results: list[measure.Throughput], baseline: tuple[str, int, int]) -> list[str]:
    """Medians (min-max) per flow, event detail, processes and concurrency; ratios to the same flow's drains of
    `baseline` (event detail, processes, concurrency)."""
    rows = [
        "| flow | events | processes | concurrency | runs/s | worker CPU ms/run | statements/run | commits/run | "
        "context switches/run | runs/s ÷ base | CPU/run ÷ base |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def of(key: tuple[str, str, int, int]) -> list[measure.Throughput]:
        return [t for t in results if (t.flow, t.variant, t.processes, t.concurrency) == key]

    for key in sorted({(t.flow, t.variant, t.processes, t.concurrency) for t in results}):
        here, base = of(key), of((key[0], *baseline))
        rate = [t.runs_per_second for t in here]
        cpu = [t.cpu_ms_per_run for t in here]
        ratios = ["n/a", "n/a"]
        if base:
            ratios = [
                f"{statistics.median(rate) / statistics.median(t.runs_per_second for t in base):.2f}",
                f"{statistics.median(cpu) / statistics.median(t.cpu_ms_per_run for t in base):.2f}",
            ]
        cells = [
            key[0],
            key[1] or "steps",
            str(key[2]),
            str(key[3]),
            _spread(rate),
            _spread(cpu),
            _spread([t.load.statements / t.runs for t in here]),
            _spread([t.load.commits / t.runs for t in here]),
            _spread([t.worker_kernel.switches / t.runs for t in here]),
            *ratios,
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


# -- the parts -------------------------------------------------------------------------------------------


def _profiles(bench: measure.Bench, out: Path, runs: int) -> dict[str, measure.Throughput]:
    """Each flow drained once per sampling; the drains sampled without `--gil`, by flow."""
    drains = {}
    for flow in PROFILED_FLOWS:
        for sampling, options in SAMPLINGS.items():
            observer = partial(_sampled, stacks_file(out, flow, sampling), options)
            t = measure.throughput(bench, "fireflow", flow, 1, 1, runs, observe=observer)
            if not sampling:
                drains[flow] = t
            rate = f"{t.runs_per_second:.0f} runs/s, {t.cpu_ms_per_run:.2f} CPU ms/run"
            _say(f"profiled {flow} {sampling}: {rate} ({report.load_average()})")
    return drains


def read_profiles(out: Path) -> list[Profile]:
    return [
        Profile(flow, sampling, read_stacks(stacks_file(out, flow, sampling)))
        for flow in PROFILED_FLOWS
        for sampling in SAMPLINGS
        if stacks_file(out, flow, sampling).exists()
    ]


def _drain(
    bench: measure.Bench,
    results: list[measure.Throughput],
    flow: str,
    processes: int,
    concurrency: int,
    runs: int,
    events: str | None,
) -> None:
    t = measure.throughput(
        bench, "fireflow", flow, 1, processes, runs, concurrency, events=events, variant=events or ""
    )
    results.append(t)
    _say(
        f"{flow} {events or 'steps'} x{processes} @{concurrency}: {t.runs_per_second:.0f} runs/s, "
        f"{t.cpu_ms_per_run:.2f} CPU ms/run, {t.load.statements / t.runs:.1f} statements/run ({report.load_average()})"
    )


def _interleaved(jobs: Sequence[Job], repeat: int) -> None:
    for round_ in range(repeat):
        shift = round_ % len(jobs)
        for job in [*jobs[shift:], *jobs[:shift]]:
            job()


def _print(tables: list[list[str]]) -> None:
    for table in tables:
        print("\n".join(table), end="\n\n")


def summarize(out: Path) -> None:
    """The profiles' sample tables from the stacks kept in `out` (no database, no drain)."""
    _print(profile_tables(read_profiles(out), {}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1500, help="runs of each profiled drain (default 1500)")
    parser.add_argument("--drain-runs", type=int, default=600, help="runs of the other drains (default 600)")
    parser.add_argument("--repeat", type=int, default=2, help="interleaved rounds of events and sizing (default 2)")
    parser.add_argument("--only", choices=("profiles", "events", "sizing"), action="append")
    parser.add_argument("--out", type=Path, help="where the stacks go (default: a new temporary directory)")
    parser.add_argument("--summarize", type=Path, metavar="DIR", help="only print the tables of the stacks in DIR")
    args = parser.parse_args(argv)
    if args.summarize:
        summarize(args.summarize)
        return 0
    parts = set(args.only or ("profiles", "events", "sizing"))
    if "profiles" in parts and not PY_SPY.exists():
        raise SystemExit(
            f"the profiles need py-spy: {sys.executable} -m pip install -c .ci/constraints.txt -e '.[bench]'"
        )
    out = args.out or Path(tempfile.mkdtemp(prefix="fireflow-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    server, origin = bench_server(track_functions="pl")
    _say(f"starting PostgreSQL ({origin}) on 127.0.0.1; stacks and logs in {out}; load {report.load_average()}")
    server.start()
    load_at_start = report.load_average()
    try:
        databases = Databases(server)
        databases.prepare(("fireflow",))
        bench = measure.Bench(databases, out)
        drains = _profiles(bench, out, args.runs) if "profiles" in parts else {}
        events: list[measure.Throughput] = []
        if "events" in parts:
            jobs = [partial(_drain, bench, events, "3-node", 1, 50, args.drain_runs, e) for e in (None, "live")]
            _interleaved(jobs, args.repeat)
        sizing: list[measure.Throughput] = []
        if "sizing" in parts:
            jobs = [
                partial(_drain, bench, sizing, flow, processes, concurrency, args.drain_runs, None)
                for flow in PROFILED_FLOWS
                for processes in PROCESSES
                for concurrency in CONCURRENCIES
            ]
            _interleaved(jobs, args.repeat)
    finally:
        server.stop()
    command = " ".join([".venv/bin/python -m benchmarks.profile_worker", *(sys.argv[1:] if argv is None else argv)])
    print(
        f"## Where the worker's time goes\n\n`{command}`: {time.monotonic() - started:.0f} s, "
        f"{os.cpu_count()} CPUs, load average {load_at_start} at the start and {report.load_average()} at the end; "
        f"stacks in {out}\n"
    )
    tables: list[list[str]] = []
    if drains:
        tables += profile_tables(read_profiles(out), drains)
    if events:
        tables.append(drain_table(events, ("", 1, 50)))
    if sizing:
        tables.append(drain_table(sizing, ("", 1, 50)))
    _print(tables)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
