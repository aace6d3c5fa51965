"""The worker's endpoints (/healthz, /readyz, /metrics) on the address FIREFLOW_HEALTH_HOST names, an IPv6 one
included (a pool's spec.bindAddress `::`): one process, and a supervisor in front of several. The IPv6
loopback stands in for `::` here, on the same code path, so that nothing listens beyond this machine."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable

import pytest

from tests.support.proc import WorkerProcess

StartWorker = Callable[..., WorkerProcess]


@pytest.mark.parametrize("processes", ["1", "2"])
def test_should_serve_its_endpoints_on_an_ipv6_address_when_told(
    start_worker: StartWorker, migrated_url: str, processes: str
) -> None:
    worker = start_worker("pool-0", FIREFLOW_HEALTH_HOST="::1", FIREFLOW_WORKER_PROCESSES=processes)
    assert worker.address == "[::1]"
    assert worker.get("/healthz") == (200, "ok\n")
    assert worker.get("/readyz")[0] == 200
    assert "# TYPE fireflow_" in worker.get("/metrics")[1]
    with pytest.raises(OSError):  # bound to the IPv6 address alone
        urllib.request.urlopen(f"http://127.0.0.1:{worker.port}/healthz", timeout=5)
