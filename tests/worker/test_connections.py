"""Every connection a worker opens is one of DBOS's pool (or its LISTEN connection) and carries the
worker's `application_name`, so the operator's budget (pool + 1 per worker) counts it - also when every
run loads its flow from the database (provision cache off)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from fireflow_worker.client import FireflowClient
from tests.support import flows
from tests.support.proc import WorkerProcess

StartWorker = Callable[..., WorkerProcess]
POOL_SIZE = 4


def _local_ports(pid: int) -> set[int]:
    """The local TCP ports of the sockets process `pid` holds (Linux /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = str(fd.readlink())
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _worker_backends(url: str, pid: int) -> list[str]:
    """The application_name of every server backend whose client is the worker process."""
    ports = _local_ports(pid)
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT client_port, application_name FROM pg_stat_activity WHERE client_port IS NOT NULL")
        return [str(name) for port, name in rows.fetchall() if port in ports]


def test_should_keep_every_worker_connection_in_the_pool_and_named(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str
) -> None:
    worker = start_worker(FIREFLOW_PROVISION_CACHE_TTL_MS="0", DBOS_SYSTEM_DATABASE_POOL_SIZE=str(POOL_SIZE))
    assert worker.process is not None
    pid = worker.process.pid
    client.save_flow("stored", flows.greet_flow())
    seen: list[list[str]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            seen.append(_worker_backends(migrated_url, pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        run_ids = [client.enqueue(flow_ref="stored", inputs={"who": str(i)}) for i in range(40)]
        for i, run_id in enumerate(run_ids):
            assert client.result(run_id, timeout_seconds=120) == {"hello": f"Hello {i}"}
    finally:
        done.set()
        sampler.join()
    assert len(seen) > 10
    names = {name for sample in seen for name in sample}
    assert names == {"fireflow-worker:worker-a"}, names
    assert max(len(sample) for sample in seen) <= POOL_SIZE + 1
