"""Fixtures of the chart tests: helm itself, and a second namespace for the multi-namespace mode."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from tests.chart.chart import missing_helm
from tests.kube import rawapi
from tests.kube.cluster import Cluster, wait_for_service_account
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
    name = f"{kube_namespace}-b"
    core = CoreV1Api(kube_cluster.api)
    rawapi.call(core.create_namespace, {"metadata": {"name": name, "labels": {"fireflow.dev/test": "true"}}})
    wait_for_service_account(core, name)
    yield name
    try:
        rawapi.call(core.delete_namespace, name)
    except ApiException as error:
        if error.status != 404:
            raise
