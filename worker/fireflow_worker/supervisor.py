"""The supervisor of a pod's worker processes (`FIREFLOW_WORKER_PROCESSES` > 1): PID 1 of the container.

It starts N complete workers (see processes.py for their executor ids), each serving its health endpoints on
a loopback port of its own (bound by the process, which tells the supervisor through a pipe), and serves the
pod's `/healthz`, `/readyz` and `/metrics` on the one port: healthy while every process answers its
`/healthz`, ready only while every process is ready, and the metrics of all of them, each sample labelled
`process="<k>"`.

SIGTERM is forwarded to every process; each drains as a single worker would, and the supervisor exits once
all have (SIGKILL to any still running after the drain timeout and a grace of a few seconds).

A process that exits on its own (a crash, the OOM killer, a worker whose machinery broke) is not restarted
here: the supervisor drains the others and exits with that process's status, so that Kubernetes restarts
the pod. The kubelet then owns restarts, back-off and their count, which the operator and `kubectl` see; a
restart loop inside the container would hide a crash loop from both. Nothing is lost: the drained
processes' runs stay PENDING under their ids and every process recovers its own at the restart.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from types import FrameType

from prometheus_client import Metric
from prometheus_client.parser import text_string_to_metric_families

from fireflow_contract import logformat, telemetry, worker_variables
from fireflow_contract.dburl import SecretMask
from fireflow_contract.executor_ids import child_executor_id
from fireflow_contract.explain import bind_error
from fireflow_contract.worker_variables import HEALTH_HOST, HEALTH_PORT
from fireflow_worker.config import WorkerConfig
from fireflow_worker.health import NOT_FOUND, Reply, http_server, probe_handler
from fireflow_worker.processes import HEALTH_PORT_FD_ENV, SUPERVISOR_PID_ENV

log = logging.getLogger("fireflow.supervisor")

PROBE_TIMEOUT_SECONDS = 2.0
# After the drain timeout, how long the supervisor still waits before it kills what is left.
KILL_GRACE_SECONDS = 5.0


@dataclass
class Child:
    index: int
    executor_id: str | None
    process: subprocess.Popen[bytes] | None = None
    # The loopback port of the process's health server, once it has said which (read end of its pipe).
    port: int | None = None
    port_pipe: int | None = None
    _port_lock: threading.Lock = field(default_factory=threading.Lock)

    def health_port(self) -> int | None:
        """The port the process bound, read from its pipe without waiting (None: not said yet)."""
        with self._port_lock:
            if self.port is None and self.port_pipe is not None and select.select([self.port_pipe], [], [], 0)[0]:
                said = os.read(self.port_pipe, 64).decode().strip()
                os.close(self.port_pipe)
                self.port_pipe = None  # said, or the process closed it unsaid (it ended): nothing more comes
                self.port = int(said) if said.isdigit() else None
            return self.port

    def get(self, path: str) -> tuple[int, str]:
        port = self.health_port()
        if port is None:
            return 0, "not answering (its health server has not started)"
        try:
            url = f"http://127.0.0.1:{port}{path}"
            with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_SECONDS) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as err:
            return int(err.code), err.read().decode()
        except OSError as err:
            return 0, f"not answering ({err})"


def child_env(config: WorkerConfig, child: Child, environ: dict[str, str]) -> dict[str, str]:
    """The environment of one worker process: the pod's, with its own id and a loopback health port."""
    env = dict(environ)
    env.pop(worker_variables.WORKER_ID_ALIAS, None)
    if child.executor_id is not None:
        env[worker_variables.WORKER_ID] = child.executor_id
    env[worker_variables.PROCESSES] = "1"
    env[worker_variables.HEALTH_HOST] = "127.0.0.1"
    env[worker_variables.HEALTH_PORT] = "0"
    env[SUPERVISOR_PID_ENV] = str(os.getpid())
    return env


class Supervisor:
    def __init__(self, config: WorkerConfig, processes: int) -> None:
        self.config = config
        self.children = [Child(k, child_executor_id(config.worker_id, k)) for k in range(processes)]
        self.draining = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=max(4, processes), thread_name_prefix="probe")

    def start(self) -> None:
        for child in self.children:
            env = child_env(self.config, child, dict(os.environ))
            child.port_pipe, said = os.pipe()
            env[HEALTH_PORT_FD_ENV] = str(said)
            child.process = subprocess.Popen(
                [sys.executable, "-m", "fireflow_worker", "run"], env=env, pass_fds=(said,)
            )
            os.close(said)
            log.info(
                "started worker process %d (executor %s, pid %d)", child.index, child.executor_id, child.process.pid
            )

    def _each(self, path: str) -> list[tuple[int, str]]:
        return list(self._pool.map(lambda child: child.get(path), self.children))

    def healthz(self) -> tuple[int, str]:
        answers = self._each("/healthz")
        sick = [f"process {k}: {text.strip()}" for k, (code, text) in enumerate(answers) if code != HTTPStatus.OK]
        return (HTTPStatus.SERVICE_UNAVAILABLE, "; ".join(sick) + "\n") if sick else (HTTPStatus.OK, "ok\n")

    def readyz(self) -> tuple[int, str]:
        if self.draining.is_set():
            return HTTPStatus.SERVICE_UNAVAILABLE, "draining\n"
        answers = self._each("/readyz")
        waiting = [f"process {k}: {text.strip()}" for k, (code, text) in enumerate(answers) if code != HTTPStatus.OK]
        if waiting:
            return HTTPStatus.SERVICE_UNAVAILABLE, "; ".join(waiting) + "\n"
        return HTTPStatus.OK, f"ready ({len(self.children)} processes)\n"

    def metrics(self) -> bytes:
        """Every process's metrics, each sample labelled with its process index."""
        merged: dict[str, Metric] = {}
        for index, (code, text) in enumerate(self._each("/metrics")):
            if code != HTTPStatus.OK:
                continue
            for family in text_string_to_metric_families(text):
                into = merged.setdefault(family.name, Metric(family.name, family.documentation, family.type))
                for sample in family.samples:
                    labels = {**sample.labels, "process": str(index)}
                    into.add_sample(sample.name, labels, sample.value, sample.timestamp, sample.exemplar)
        return b"".join(_exposition(metric) for metric in merged.values())

    def forward(self, signum: int) -> None:
        for child in self.children:
            if child.process is not None and child.process.poll() is None:
                child.process.send_signal(signum)

    def wait(self, stop: threading.Event) -> int:
        """Until SIGTERM (then drain all) or a process's own exit (then drain the others); the exit status."""
        while not stop.wait(0.2):
            exited = next((c for c in self.children if c.process is not None and c.process.poll() is not None), None)
            if exited is not None:
                assert exited.process is not None
                status = _exit_status(exited.process.returncode)
                log.error(
                    "worker process %d (executor %s) exited with status %d: draining the others and exiting with "
                    "it, so that the pod is restarted",
                    exited.index,
                    exited.executor_id,
                    status,
                )
                self._drain()
                return status or 1
        self._drain()
        return 0

    def _drain(self) -> None:
        self.draining.set()
        self.forward(signal.SIGTERM)
        deadline = time.monotonic() + self.config.drain_timeout_ms / 1000 + KILL_GRACE_SECONDS
        for child in self.children:
            assert child.process is not None
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker process %d did not stop after the drain timeout: killing it", child.index)
                child.process.kill()
                child.process.wait()


def _exit_status(returncode: int) -> int:
    """A child's exit status as a shell reports it (128 + signal for a killed one)."""
    return 128 - returncode if returncode < 0 else returncode


def _exposition(metric: Metric) -> bytes:
    from prometheus_client.exposition import generate_latest  # noqa: PLC0415

    class _One:
        def collect(self) -> Iterator[Metric]:
            yield metric

    return generate_latest(_One())


def run_supervisor(config: WorkerConfig, processes: int) -> int:
    """Run `processes` workers until SIGTERM or until one exits; returns the supervisor's exit status."""
    logformat.configure(config.log_level, config.log_format)
    logformat.set_process_context(
        namespace=os.environ.get(worker_variables.POD_NAMESPACE), pool=os.environ.get(worker_variables.POOL)
    )
    try:  # its own lines; each worker process exports its own
        telemetry.configure_log_export("fireflow-worker", filters=[SecretMask([config.system_database_url])])
    except telemetry.TelemetryError as err:
        log.error("cannot start: %s", err)
        return 2
    supervisor = Supervisor(config, processes)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s: draining %d worker processes", signal.Signals(signum).name, processes)
        supervisor.draining.set()
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server = http_server(config.health_host, config.health_port, _handler_for(supervisor))
    except OSError as err:
        log.error("cannot start: %s", bind_error(err, config.health_host, config.health_port, HEALTH_HOST, HEALTH_PORT))
        return 1
    threading.Thread(target=server.serve_forever, name="health-server", daemon=True).start()
    log.info(
        "supervising %d worker processes (executors %s), health on port %d",
        processes,
        ", ".join(str(c.executor_id) for c in supervisor.children),
        server.server_address[1],
    )
    supervisor.start()
    status = supervisor.wait(stop)
    log.info("stopped (status %d)", status)
    server.shutdown()
    telemetry.shutdown()  # exports the log records still buffered
    return status


def _handler_for(supervisor: Supervisor) -> type[BaseHTTPRequestHandler]:
    def route(path: str) -> Reply:
        if path == "/healthz":
            code, text = supervisor.healthz()
            return code, text.encode(), "text/plain"
        if path == "/readyz":
            code, text = supervisor.readyz()
            return code, text.encode(), "text/plain"
        if path == "/metrics":
            return HTTPStatus.OK, supervisor.metrics(), "text/plain; version=0.0.4; charset=utf-8"
        return NOT_FOUND

    return probe_handler(route)
