"""tests/unit means no cluster and no database: a test here that asks for one belongs to tests/worker or
tests/operator, where the servers are started."""

from __future__ import annotations

import pytest

NEEDS_A_SERVER = {"postgres", "database_url", "kube_cluster", "kube_api", "kube_namespace", "project_images"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent.name != "unit":
            continue
        servers = NEEDS_A_SERVER & set(getattr(item, "fixturenames", ()))
        if servers:
            raise pytest.UsageError(
                f"{item.nodeid} asks for {', '.join(sorted(servers))}: tests/unit runs without a database or a "
                "cluster, so move it to tests/worker or tests/operator"
            )
