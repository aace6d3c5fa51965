"""On kind, the product runs as users deploy it: the operator pod is the image built from Dockerfile.operator
and the worker pods the image built from Dockerfile.worker (the same image ids the local Docker engine has),
as uid 10001 on a read-only root filesystem."""

from __future__ import annotations

import subprocess

import pytest

from tests.e2e.harness import OperatorRelease, Stage
from tests.kube.engine import image_id
from tests.kube.kind_cluster import KindCluster

pytestmark = [pytest.mark.e2e, pytest.mark.kind]


def _exec(cluster: KindCluster, namespace: str, pod: str, *command: str) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("exec", "-n", namespace, pod, "--", *command, check=False)


def test_should_run_the_operator_and_the_workers_from_the_images_built_from_the_dockerfiles(
    stage: Stage, operator: OperatorRelease, kube_cluster: KindCluster
) -> None:
    stage.apply_pool(replicas=1)
    stage.wait_ready(replicas=1)
    (worker,) = stage.ready_workers()
    (operator_pod,) = operator.pods()
    for pod, name, dockerfile in ((worker, "fireflow-worker", "Dockerfile.worker"),
                                  (operator_pod, "fireflow-operator", "Dockerfile.operator")):  # fmt: skip
        (status,) = pod["status"]["containerStatuses"]
        built = image_id(kube_cluster.image(name))
        assert kube_cluster.node_image_id(status["image"]) == built, f"{pod['metadata']['name']} is not {dockerfile}"

    worker_name = worker["metadata"]["name"]
    assert _exec(kube_cluster, stage.namespace, worker_name, "id", "-u").stdout.strip() == "10001"
    write = _exec(kube_cluster, stage.namespace, worker_name, "touch", "/opt/fireflow/written")
    assert write.returncode != 0 and "Read-only file system" in write.stderr, write
    assert _exec(kube_cluster, stage.namespace, worker_name, "touch", "/tmp/written").returncode == 0
