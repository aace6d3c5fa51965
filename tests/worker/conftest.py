"""Worker-tier fixtures: real worker subprocesses against a fresh database each."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from fireflow_worker import migrate
from fireflow_worker.client import FireflowClient
from tests.support.proc import WorkerProcess

ALLOWED_MODULES = "tests.support.sideeffects"


@pytest.fixture(autouse=True)
def _python_node_allow_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client validates python nodes against the same allow-list the workers get."""
    monkeypatch.setenv("FIREFLOW_PYTHON_NODE_MODULES", ALLOWED_MODULES)


@pytest.fixture
def start_worker(database_url: str) -> Iterator[Callable[..., WorkerProcess]]:
    """Start a worker process on the test's database: `start_worker("id", ENV=value, ...)`."""
    started: list[WorkerProcess] = []

    def start(worker_id: str | None = "worker-a", *, wait: bool = True, **env: str) -> WorkerProcess:
        worker = WorkerProcess(database_url, worker_id, FIREFLOW_PYTHON_NODE_MODULES=ALLOWED_MODULES, **env).start()
        started.append(worker)
        return worker.wait_ready() if wait else worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def migrated_url(database_url: str) -> str:
    """The test's database, migrated as the operator's migration Job would (the client never migrates)."""
    assert migrate.apply(database_url).result == "ok"
    return database_url


@pytest.fixture
def client(migrated_url: str) -> Iterator[FireflowClient]:
    with FireflowClient(migrated_url) as fireflow:
        yield fireflow
