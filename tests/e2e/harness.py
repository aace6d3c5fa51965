"""What the e2e scenarios share: the operator's Helm release and the pool under test ("stage"). The
databases are in `databases.py`, the trace server in `tracer.py`, watch events in `watch.py`, flows and
runs in `runs.py`; what differs between the local cluster and kind is all in `adapter.py`.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client import AppsV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from fireflow_operator.api.model import GROUP, PLURAL, VERSION
from tests.e2e.adapter import ClusterAdapter, Images
from tests.e2e.databases import Database, Urls
from tests.e2e.runs import WAIT
from tests.e2e.tracer import TraceServer
from tests.e2e.watch import Recorder
from tests.kube import rawapi
from tests.kube.cluster import Cluster, wait_for_service_account
from tests.kube.tools import REPO_ROOT, helm_path, kubectl_path
from tests.support.pools import condition, create_secret, wait_until

Json = dict[str, Any]
CHART_DIR = REPO_ROOT / "charts" / "fireflow-operator"
SECRET = "fireflow-db"
POOL = "pool"


def create_namespace(cluster: Cluster, name: str) -> None:
    core = CoreV1Api(cluster.api)
    rawapi.call(core.create_namespace, {"metadata": {"name": name, "labels": {"fireflow.dev/test": "true"}}})
    wait_for_service_account(core, name)


def delete_namespace(cluster: Cluster, name: str) -> None:
    with contextlib.suppress(ApiException):
        rawapi.call(CoreV1Api(cluster.api).delete_namespace, name)


class HelmError(AssertionError):
    pass


class OperatorRelease:
    """The chart installed into its own namespace: the operator runs as a pod under the chart's
    ServiceAccount and RBAC, with fast settings (resync 5 s, first migration retry after 3 s)."""

    def __init__(self, adapter: ClusterAdapter, namespace: str, release: str, images: Images) -> None:
        self.adapter, self.cluster = adapter, adapter.cluster
        self.namespace, self.release, self.images = namespace, release, images
        self.deployment = f"{release}-fireflow-operator"
        self.pool_namespaces: list[str] = []  # whose pools must be gone before the operator is uninstalled
        self._values_dir = Path(tempfile.mkdtemp(prefix="fireflow-e2e-values-"))

    def values(self) -> Json:
        values: Json = {
            "image": {"repository": self.images.operator_repository, "tag": self.images.operator_tag},
            "operator": {"resyncSeconds": 5, "migrationRetrySeconds": 3},
        }
        for key, extra in self.adapter.operator_values().items():
            values[key] = {**values.get(key, {}), **extra}
        return values

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [str(helm_path()), "--kubeconfig", str(self.cluster.kubeconfig), "--namespace", self.namespace, *args]
        result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
        if check and result.returncode != 0:
            raise HelmError(f"helm {' '.join(args[:2])} failed: {result.stderr.strip() or result.stdout.strip()}")
        return result

    def install(self) -> None:
        values_file = self._values_dir / "values.yaml"
        values_file.write_text(yaml.safe_dump(self.values()))
        # --take-ownership: the test cluster applied crds/ with kubectl; the chart adopts that same CRD.
        self.helm("install", self.release, str(CHART_DIR), "--take-ownership", "--values", str(values_file))
        wait_until(f"deployment/{self.deployment} to be Available", self.available, WAIT)

    def installed(self) -> bool:
        return self.helm("status", self.release, check=False).returncode == 0

    def uninstall(self) -> str:
        """`helm uninstall`; returns what helm printed."""
        return self.helm("uninstall", self.release, "--wait", "--timeout", "5m").stdout

    def available(self) -> bool:
        try:
            deployment = rawapi.call(AppsV1Api(self.cluster.api).read_namespaced_deployment, self.deployment,
                                     self.namespace)  # fmt: skip
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        status = deployment.get("status", {})
        return any(c["type"] == "Available" and c["status"] == "True" for c in status.get("conditions", [])) and bool(
            status.get("availableReplicas")
        )

    def pods(self) -> list[Json]:
        selector = f"app.kubernetes.io/instance={self.release},app.kubernetes.io/name=fireflow-operator"
        items: list[Json] = rawapi.call(CoreV1Api(self.cluster.api).list_namespaced_pod, self.namespace,
                                        label_selector=selector)["items"]  # fmt: skip
        return items

    def logs(self) -> str:
        return "".join(self.cluster.logs(self.namespace, p["metadata"]["name"]) for p in self.pods())

    def interesting_logs(self, limit: int = 15_000) -> str:
        """The operator's output without kopf's per-event success lines (what a failed test needs)."""
        routine = ("Handler 'child_changed' succeeded", "Timer 'pool_resync' succeeded", "is processed: 1 succeeded")
        lines = [line for line in self.logs().splitlines() if not any(r in line for r in routine)]
        return "\n".join(lines)[-limit:]


def kubectl_apply(cluster: Cluster, objects: list[Json], namespace: str | None = None) -> None:
    """`kubectl apply -f -`, as a user applies manifests."""
    argv = [str(kubectl_path()), "--kubeconfig", str(cluster.kubeconfig), "apply", "-f", "-"]
    if namespace:
        argv += ["--namespace", namespace]
    subprocess.run(argv, input=yaml.safe_dump_all(objects), text=True, check=True, capture_output=True)


def _pod_ready(pod: Json) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def worker_pod(name: str, pool: str = POOL) -> bool:
    """A worker of the pool (its StatefulSet's pods), not a migration Job's pod."""
    return re.fullmatch(rf"{re.escape(pool)}-\d+", name) is not None


@dataclass
class Stage:
    """One namespace, one database with its Secret, and the pool the scenario drives."""

    cluster: Cluster
    namespace: str
    urls: Urls
    images: Images
    tracer: TraceServer
    name: str = POOL
    recorders: list[Recorder] = field(default_factory=list)

    @property
    def api(self) -> Any:
        return self.cluster.api

    @property
    def custom(self) -> CustomObjectsApi:
        return CustomObjectsApi(self.cluster.api)

    def manifest(self, replicas: int, **spec: Any) -> Json:
        dbos = {"pollingIntervalMs": 50, "shutdownDrainTimeoutMs": 3000, "systemDatabasePoolSize": 10,
                **spec.pop("dbos", {})}  # fmt: skip
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "FireflowWorkerPool",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "image": self.images.worker_v1,
                "replicas": replicas,
                "database": {"secretRef": {"name": SECRET, "key": "url"}},
                "dbos": dbos,
                "terminationGracePeriodSeconds": 10,
                **spec,
            },
        }

    def apply_pool(self, replicas: int, **spec: Any) -> None:
        """What a user does: `kubectl apply` the pool's manifest."""
        kubectl_apply(self.cluster, [self.manifest(replicas, **spec)])

    def patch(self, spec: Json) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name, {"spec": spec})

    def pool(self) -> Json:
        found: Any = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)
        return dict(found)

    def wait_pool(self, what: str, predicate: Callable[[Json], bool]) -> Json:
        def check() -> Json | None:
            pool = self.pool()
            return pool if predicate(pool) else None

        found: Json = wait_until(f"pool {self.namespace}/{self.name}: {what}", check, WAIT)
        return found

    def wait_ready(self, image: str | None = None, replicas: int | None = None) -> Json:
        """Ready=True at the image (default: the spec's) with that many ready workers (default: the spec's)."""

        def ready(pool: Json) -> bool:
            status = pool.get("status") or {}
            want_image = image or pool["spec"]["image"]
            want = replicas if replicas is not None else pool["spec"].get("replicas")
            return (
                condition(pool, "Ready").get("status") == "True"
                and status.get("currentImage") == want_image
                and status.get("observedGeneration") == pool["metadata"]["generation"]
                and (want is None or status.get("readyReplicas") == want)
            )

        return self.wait_pool("Ready", ready)

    def statefulset(self) -> Json:
        return rawapi.call(AppsV1Api(self.api).read_namespaced_stateful_set, self.name, self.namespace)

    def pods(self) -> list[Json]:
        items = rawapi.call(CoreV1Api(self.api).list_namespaced_pod, self.namespace)["items"]
        return [p for p in items if worker_pod(p["metadata"]["name"], self.name)]

    def ready_workers(self) -> list[Json]:
        return [p for p in self.pods() if _pod_ready(p) and not p["metadata"].get("deletionTimestamp")]

    def executor(self, pod_name: str) -> str:
        return f"{self.namespace}.{pod_name}"

    def executors(self, replicas: int) -> set[str]:
        return {self.executor(f"{self.name}-{i}") for i in range(replicas)}

    def events(self) -> list[Json]:
        items: list[Json] = rawapi.call(CoreV1Api(self.api).list_namespaced_event, self.namespace)["items"]
        return items

    def record(self) -> Recorder:
        recorder = Recorder(self.cluster, self.namespace)
        self.recorders.append(recorder)
        return recorder

    def delete_pool(self, wait: bool, timeout: float = 120.0) -> None:
        """Delete the pool (the operator's finalizer drains it and hands back its runs first). With `wait`, a
        pool still there after `timeout` has its finalizer removed, so the rest can be cleaned up, and the
        stuck deletion is raised."""
        try:
            self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)
        except ApiException as error:
            if error.status == 404:
                return
            raise
        if not wait:
            return
        try:
            wait_until(f"pool {self.namespace}/{self.name} to be deleted", lambda: not pools_in(self.cluster,
                       self.namespace), timeout)  # fmt: skip
        except AssertionError:
            stuck = force_finalize(self.cluster, self.namespace)
            raise AssertionError(f"the operator did not finish deleting {stuck}; removed their finalizers") from None

    def close(self) -> None:
        for recorder in self.recorders:
            recorder.stop()


def pools_in(cluster: Cluster, namespace: str) -> list[Json]:
    listed: Any = CustomObjectsApi(cluster.api).list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    items: list[Json] = listed["items"]
    return items


def force_finalize(cluster: Cluster, namespace: str) -> list[str]:
    """Remove the finalizers of the namespace's pools (cleanup after the operator could not); returns their names."""
    names = []
    for pool in pools_in(cluster, namespace):
        name = pool["metadata"]["name"]
        with contextlib.suppress(ApiException):
            CustomObjectsApi(cluster.api).patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, {"metadata": {"finalizers": None}}
            )
        names.append(f"{namespace}/{name}")
    return names


def setup_stage(cluster: Cluster, namespace: str, database: Database, images: Images, tracer: TraceServer) -> Stage:
    """A fresh database and its Secret (the URL as the pods reach it)."""
    urls = database.create_database(f"e2e_{secrets.token_hex(6)}")
    create_secret(cluster.api, namespace, urls.pods, name=SECRET)
    return Stage(cluster, namespace, urls, images, tracer)
