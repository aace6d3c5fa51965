"""Worker subprocesses for the benchmark, each started the same way (own executor id, migrations off, logs to
a file): `fireflow-worker` (a pod: one process, or a supervisor and N), the raw DBOS-py baseline, the DBOS-TS
worker; and the migration each kind's deployment runs before them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from benchmarks.cpu import tree_pids
from benchmarks.workload import APPLICATION_NAME, EFFECTS_MODULE, TS_DIR, WORKER_CONCURRENCY, Kind
from fireflow_contract.dburl import redact_url
from fireflow_local.ports import free_port

BIN = Path(sys.executable).parent
REPO_ROOT = Path(__file__).resolve().parents[1]
TS_CLI = TS_DIR / "node_modules" / "@dbos-inc" / "dbos-sdk" / "dist" / "src" / "cli" / "cli.js"
# Seconds to wait after a worker reports ready: DBOS's queue manager starts a queue's polling thread up to
# one second after the queue is registered.
QUEUE_THREAD_SETTLE_SECONDS = 1.5


class WorkerError(RuntimeError):
    """A worker or migration subprocess failed; the message carries the tail of its log."""


def migrate(kind: Kind, database_url: str) -> None:
    """`fireflow-worker migrate` (DBOS schema + the project's triggers), plain `dbos migrate` for raw DBOS-py,
    the TS SDK's `dbos schema` for DBOS-TS."""
    env = dict(os.environ)
    if kind == "fireflow":
        args = [str(BIN / "fireflow-worker"), "migrate"]
        env |= {"DATABASE_URL_EXECUTIONS": database_url, "FIREFLOW_TERMINATION_LOG": os.devnull}
    elif kind == "ts":
        args = ["node", str(TS_CLI), "schema", database_url]
    else:
        args = [str(BIN / "dbos"), "migrate", "-s", database_url]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        output = redact_url(f"{done.stdout[-2000:]} {done.stderr[-2000:]}")
        raise WorkerError(f"{kind} migration failed ({done.returncode}): {output}")


class Worker:
    """One worker of any kind: for `fireflow`, one pod of `processes` processes."""

    def __init__(
        self,
        kind: Kind,
        database_url: str,
        worker_id: str,
        log_dir: Path,
        *,
        polling_ms: int,
        queues: list[str],
        processes: int = 1,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.kind = kind
        self.worker_id = worker_id
        stem = f"{database_url.rsplit('/', 1)[1]}-{worker_id}"
        self.log_path = log_dir / f"{stem}.log"
        self._ready_file = log_dir / f"{stem}.ready"
        self._health_port = free_port()
        self.env = {
            **os.environ,
            "PYTHONPATH": str(REPO_ROOT),
            "DATABASE_URL_EXECUTIONS": database_url,
            "DBOS_APPLICATION_NAME": APPLICATION_NAME,
            "FIREFLOW_WORKER_ID": worker_id,
            "DBOS_RUN_MIGRATIONS": "false",
            "DBOS_QUEUE_POLLING_INTERVAL_MS": str(polling_ms),
            "DBOS_WORKER_CONCURRENCY": str(WORKER_CONCURRENCY),
            "DBOS_QUEUE_CONCURRENCY": "0",
            "DBOS_SYSTEM_DATABASE_POOL_SIZE": "30",
            "DBOS_LOG_LEVEL": "info",
            "FIREFLOW_APPLICATION_VERSION": "1.0.0",
            "FIREFLOW_QUEUES": ",".join(queues),
            # What the `3-python` flow's nodes call (only FireFlow reads it).
            "FIREFLOW_PYTHON_NODE_MODULES": EFFECTS_MODULE,
            "FIREFLOW_WORKER_PROCESSES": str(processes),
            "FIREFLOW_HEALTH_HOST": "127.0.0.1",
            "FIREFLOW_HEALTH_PORT": str(self._health_port),
            "BENCH_QUEUES": ",".join(queues),
            "BENCH_READY_FILE": str(self._ready_file),
            "BENCH_ASYNC": "1" if kind == "raw-async" else "",
            **(extra_env or {}),
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Worker:
        self._ready_file.unlink(missing_ok=True)
        if self.kind == "fireflow":
            args = [str(BIN / "fireflow-worker")]
        elif self.kind == "ts":
            args = ["node", str(TS_DIR / "worker.js")]
        else:
            args = [sys.executable, "-m", "benchmarks.baseline_worker"]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(args, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def rss_mib(self) -> float:
        """Resident memory of the worker (all of a pod's processes), now."""
        total_kib = 0
        for pid in tree_pids([self.pid]):
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total_kib += int(line.split()[1])
        return total_kib / 1024

    def is_ready(self) -> bool:
        if self.kind != "fireflow":
            return self._ready_file.exists()
        try:
            url = f"http://127.0.0.1:{self._health_port}/readyz"
            with urllib.request.urlopen(url, timeout=2) as response:
                return int(response.status) == 200
        except OSError:
            return False

    def wait_ready(self, timeout: float = 120.0) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while not self.is_ready():
            if self.process.poll() is not None:
                raise WorkerError(f"{self.kind} worker {self.worker_id} exited with {self.process.returncode}")
            if time.monotonic() > deadline:
                raise WorkerError(f"{self.kind} worker {self.worker_id} not ready after {timeout:.0f} s")
            time.sleep(0.05)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (the worker drains; there is nothing left to run), then SIGKILL if it lingers."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def log_tail(self, lines: int = 20) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def running_workers(
    kind: Kind,
    database_url: str,
    log_dir: Path,
    *,
    count: int = 1,
    polling_ms: int = 50,
    queues: list[str],
    processes: int = 1,
    extra_env: dict[str, str] | None = None,
) -> Iterator[list[Worker]]:
    """`count` workers (pods) of `kind` with distinct ids, all ready and polling, stopped on exit."""
    workers = [
        Worker(
            kind,
            database_url,
            f"bench-{kind}-{index}",
            log_dir,
            polling_ms=polling_ms,
            queues=queues,
            processes=processes,
            extra_env=extra_env,
        )
        for index in range(count)
    ]
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            try:
                worker.wait_ready()
            except WorkerError as err:
                raise WorkerError(f"{err}; log {worker.log_path}:\n{worker.log_tail()}") from None
        time.sleep(QUEUE_THREAD_SETTLE_SECONDS)
        yield workers
    finally:
        for worker in workers:
            worker.stop()
