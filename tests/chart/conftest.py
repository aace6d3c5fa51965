"""Fixtures of the chart tests: helm itself, and a second namespace for the multi-namespace mode."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chart.chart import missing_helm
from tests.kube.cluster import Cluster
from tests.kube.plugin import fresh_namespace
from tests.kube.tools import helm_path


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    """helm from build-control-plane.sh; a missing one fails the test with one line (never a skip)."""
    problem = missing_helm()
    if problem:
        pytest.fail(problem, pytrace=False)
    return helm_path()


@pytest.fixture
def other_namespace(kube_cluster: Cluster, kube_namespace: str) -> Iterator[str]:
    """A second fresh namespace next to `kube_namespace` (deleted afterwards, without waiting)."""
    with fresh_namespace(kube_cluster, f"{kube_namespace}-b") as name:
        yield name
