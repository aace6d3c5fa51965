"""Operator-tier fixtures: the operator as a real process against the Go-built control plane, and a real
PostgreSQL that the pool's worker pods (local processes on the process node) connect to."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fireflow_local.postgres import LocalPostgres
from tests.kube.cluster import Cluster
from tests.support.pools import OperatorProcess


@pytest.fixture
def operator(kube_cluster: Cluster) -> Iterator[OperatorProcess]:
    process = OperatorProcess(kube_cluster).start()
    yield process
    process.stop()
    print(process.output()[-20_000:])  # shown by pytest for a failed test


@pytest.fixture
def pool_database(database_url: str) -> str:
    """A fresh database on the session's PostgreSQL (tests/conftest.py), reachable by the worker pods."""
    return database_url


@pytest.fixture
def small_postgres() -> Iterator[LocalPostgres]:
    server = LocalPostgres(max_connections=40, settings={"superuser_reserved_connections": "3"})
    server.start()
    yield server
    server.stop()
