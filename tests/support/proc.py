"""Run `fireflow-worker` as a real subprocess, as a container would, and watch its endpoints."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from fireflow_local.ports import free_port

WORKER_BIN = str(Path(sys.executable).with_name("fireflow-worker"))
# The repository root, so workers can import the test-only callables of the `python` node.
REPO_ROOT = str(Path(__file__).resolve().parents[2])


class WorkerProcess:
    def __init__(self, database_url: str | None, worker_id: str | None = "worker-a", **env: str) -> None:
        self.port = free_port()
        self.log_path = Path(tempfile.mkstemp(prefix="fireflow-worker-", suffix=".log")[1])
        self.env = {
            **os.environ,
            "FIREFLOW_HEALTH_HOST": "127.0.0.1",
            "FIREFLOW_HEALTH_PORT": str(self.port),
            "DBOS_QUEUE_POLLING_INTERVAL_MS": "50",
            # One process unless a test asks for more (the default follows the machine's CPUs).
            "FIREFLOW_WORKER_PROCESSES": "1",
            "PYTHONPATH": REPO_ROOT,
            **env,
        }
        if database_url is not None:
            self.env["DATABASE_URL_EXECUTIONS"] = database_url
        if worker_id is not None:
            self.env["FIREFLOW_WORKER_ID"] = worker_id
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *args: str) -> WorkerProcess:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen([WORKER_BIN, *args], env=self.env, stdout=log, stderr=subprocess.STDOUT)
        return self

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def address(self) -> str:
        """The health endpoint's host as a URL spells it (an IPv6 address in brackets)."""
        host = self.env["FIREFLOW_HEALTH_HOST"]
        return f"[{host}]" if ":" in host else host

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://{self.address}:{self.port}{path}", timeout=5) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as err:
            return int(err.code), err.read().decode()

    def metric(self, name: str, labels: str = "") -> float:
        """One sample of the worker's metrics endpoint (`labels` as exposed, e.g. `{queue="..."}`); 0 if absent."""
        for line in self.get("/metrics")[1].splitlines():
            if line.startswith(f"{name}{labels} "):
                return float(line.split()[-1])
        return 0.0

    def wait_ready(self, timeout: float = 60) -> WorkerProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"worker exited with {self.process.returncode}:\n{self.output()}")
            try:
                if self.get("/readyz")[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"worker not ready after {timeout}s:\n{self.output()}")

    def not_ready(self) -> bool:
        """/readyz says 503, or nothing answers it any more because the worker has already exited (a drain can
        end between two polls of a busy machine)."""
        assert self.process is not None
        try:
            return self.get("/readyz")[0] == 503
        except OSError:
            return self.process.poll() is not None

    def wait_exit(self, timeout: float = 60) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def terminate(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)

    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log_path.unlink(missing_ok=True)


def wait_for(predicate: Callable[[], bool], what: str = "condition", timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
