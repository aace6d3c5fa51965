"""Everything in which the e2e scenarios differ between the two clusters, in one place. The scenarios,
the databases and the trace server are the same code on both.

- Worker image. Local: `fireflow-worker:1` and `:2`, which the process node runs as the venv's console
  script. kind: the image built from Dockerfile.worker, loaded under its own tag and as `…:e2e-2` (the same
  image id), so an "upgrade" is a change of image reference with the same code behind it.
- The real upgrade (kind only): the worker image built again on an older dbos release, whose schema is older,
  so upgrading from it to the project's image migrates for real. Locally there is one venv, one dbos: the
  upgrade scenario records an older schema version instead (`set_schema_behind`).
- A bad image (its worker exits at start). Local: `fireflow-worker-crashing`, which the process node runs as
  tests/kube/crashing-worker.sh. kind: that script built in front of the worker image's entry point.
- Operator image. Local: `fireflow-operator:dev` (the console script). kind: the image built from
  Dockerfile.operator.
- Operator values: the chart's defaults on both (the process node gives the operator's probe port a host
  port of its own, tests/kube/images.py).
- Servers of this process (PostgreSQL, the trace server). Local: on 127.0.0.1. kind: on the host's address
  on kind's Docker network, which pods reach through their node.
"""

from __future__ import annotations

import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from tests.kube.cluster import Cluster

Json = dict[str, Any]
UPGRADE_TAG = "e2e-2"


@dataclass(frozen=True)
class Images:
    operator_repository: str
    operator_tag: str
    worker_v1: str  # the pools' image
    worker_v2: str  # the "upgrade": same code, another reference
    worker_crashing: str  # migrates like the worker; its worker exits at start
    worker_older_dbos: str | None = None  # the worker on an older dbos (kind), None where it cannot be built


class ClusterAdapter(ABC):
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    @abstractmethod
    def images(self) -> Images: ...

    def operator_values(self) -> Json:
        """Chart values this cluster needs on top of the scenarios' own."""
        return {}

    @property
    def host_address(self) -> str:
        """Where pods reach a server of this process."""
        return self.cluster.host_address

    @property
    def host_network(self) -> str:
        """The network pods' connections to this process come from (for PostgreSQL's pg_hba)."""
        return self.cluster.host_network


class LocalAdapter(ClusterAdapter):
    def images(self) -> Images:
        return Images(
            "fireflow-operator", "dev", "fireflow-worker:1", "fireflow-worker:2", "fireflow-worker-crashing:1"
        )


class KindAdapter(ClusterAdapter):
    def images(self) -> Images:
        operator_repository, _, operator_tag = self.cluster.image("fireflow-operator").rpartition(":")
        worker = self.cluster.image("fireflow-worker")
        upgrade = f"{worker.rpartition(':')[0]}:{UPGRADE_TAG}"
        subprocess.run(["docker", "tag", worker, upgrade], check=True)
        self.cluster.load(upgrade)
        return Images(
            operator_repository,
            operator_tag,
            worker,
            upgrade,
            worker_crashing=self.cluster.image("fireflow-worker-crashing"),
            worker_older_dbos=self.cluster.image("fireflow-worker-older-dbos"),
        )


def adapter_for(cluster: Cluster) -> ClusterAdapter:
    return KindAdapter(cluster) if cluster.mode == "kind" else LocalAdapter(cluster)
