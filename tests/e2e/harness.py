"""What the e2e scenarios share: the images per cluster mode, the databases, the operator's Helm release, a
recorder of Kubernetes watch events, and the pool under test ("stage").

Everything here runs the same on both clusters; the differences are confined to three places:
- images: locally any tag of `fireflow-worker`/`fireflow-operator` maps to the venv's console scripts (the
  worker pods import `tests.e2e.sideeffects` from the repository through PYTHONPATH); on kind the worker
  image built by the harness gets the one file `tests/e2e/sideeffects.py` layered on top and is loaded as
  two tags, so an "upgrade" is a real image change with the same code;
- databases: locally a `LocalPostgres` on 127.0.0.1 (pods are local processes); on kind a `postgres`
  StatefulSet + Service in the cluster, reached by the pods through the Service's DNS name and by the
  test through `kubectl port-forward` on 127.0.0.1 (`Urls.pods` vs `Urls.local`);
- restarting PostgreSQL: `halt()` + `start()` on the same port locally, deleting the pod on kind.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import urllib3
import yaml
from fireflow_operator.model import GROUP, PLURAL, VERSION
from fireflow_worker.client import FireflowClient
from fireflow_worker.local_postgres import LocalPostgres, free_port
from kubernetes.client import AppsV1Api, BatchV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from tests.kube import rawapi
from tests.kube.cluster import Cluster, wait_for_service_account
from tests.kube.tools import REPO_ROOT, helm_path, kubectl_path
from tests.operator.conftest import condition, create_secret, wait_until

Json = dict[str, Any]
HERE = Path(__file__).resolve().parent
CHART_DIR = REPO_ROOT / "charts" / "fireflow-operator"
WAIT = 300.0  # generous: two cores run the control plane, the operator, the workers and PostgreSQL at once
SECRET = "fireflow-db"
POOL = "pool"
TRACE_MODULE = "tests.e2e.sideeffects"
KIND_MODULE_ROOT = "/opt/fireflow-e2e"  # where the kind worker image holds tests/e2e/sideeffects.py
POSTGRES_IMAGE = "postgres:17"


# -- images ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Images:
    operator_repository: str
    operator_tag: str
    worker_v1: str  # the pools' image
    worker_v2: str  # the "upgrade": same code, another reference
    module_root: str  # PYTHONPATH under which worker pods import TRACE_MODULE

    def trace_env(self) -> list[Json]:
        """The pool's spec.env that lets its workers call the trace module from a `python` node."""
        return [
            {"name": "FIREFLOW_PYTHON_NODE_MODULES", "value": TRACE_MODULE},
            {"name": "PYTHONPATH", "value": self.module_root},
        ]


def prepare_images(cluster: Cluster) -> Images:
    if cluster.mode != "kind":
        return Images("fireflow-operator", "dev", "fireflow-worker:1", "fireflow-worker:2", str(REPO_ROOT))
    operator_repository, _, operator_tag = cluster.image("fireflow-operator").rpartition(":")
    v1, v2 = "fireflow-worker:e2e-1", "fireflow-worker:e2e-2"
    with tempfile.TemporaryDirectory(prefix="fireflow-e2e-image-") as tmp:
        context = Path(tmp)
        package = context / "tests" / "e2e"
        package.mkdir(parents=True)
        (context / "tests" / "__init__.py").write_text("")
        (package / "__init__.py").write_text("")
        shutil.copy(HERE / "sideeffects.py", package / "sideeffects.py")
        dockerfile = f"FROM {cluster.image('fireflow-worker')}\nCOPY tests {KIND_MODULE_ROOT}/tests\n"
        (context / "Dockerfile").write_text(dockerfile)
        subprocess.run(["docker", "build", "-q", "-t", v1, str(context)], check=True)
    subprocess.run(["docker", "tag", v1, v2], check=True)
    for tag in (v1, v2):
        cluster._kind.load_docker_image(tag)  # type: ignore[attr-defined]  # KindCluster's pytest-kind handle
    return Images(operator_repository, operator_tag, v1, v2, KIND_MODULE_ROOT)


# -- databases ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Urls:
    """One database as the pods reach it (the Secret's URL) and as this test process reaches it."""

    pods: str
    local: str


class Database(ABC):
    max_connections: int

    @abstractmethod
    def create_database(self, name: str) -> Urls: ...

    @abstractmethod
    def restart(self) -> None:
        """Stop the server and start it again with its data (the URLs stay valid)."""

    @abstractmethod
    def server_log(self) -> str: ...

    @abstractmethod
    def stop(self) -> None: ...


class LocalDatabase(Database):
    """A LocalPostgres on 127.0.0.1: the process node's pods reach it as the test does."""

    def __init__(self, max_connections: int) -> None:
        self.max_connections = max_connections
        self.server = LocalPostgres(max_connections=max_connections).start()

    def create_database(self, name: str) -> Urls:
        url = self.server.create_database(name)
        return Urls(url, url)

    def restart(self) -> None:
        self.server.halt()
        time.sleep(3)  # an outage, not a blip: workers see refused connections for a while
        self.server.start()

    def server_log(self) -> str:
        return self.server.log_path.read_text(errors="replace") if self.server.log_path.exists() else ""

    def stop(self) -> None:
        self.server.stop()


class PortForward:
    """`kubectl port-forward` to a Service on 127.0.0.1:<port>, restarted whenever it exits (it does when
    the pod behind the Service goes away)."""

    def __init__(self, cluster: Cluster, namespace: str, service: str, remote_port: int) -> None:
        self.port = free_port()
        self._argv = [
            *(str(kubectl_path()), "--kubeconfig", str(cluster.kubeconfig), "-n", namespace, "port-forward"),
            *("--address", "127.0.0.1", f"svc/{service}", f"{self.port}:{remote_port}"),
        ]
        self._stop = threading.Event()
        self._process: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._supervise, name=f"port-forward-{service}", daemon=True)
        self._thread.start()

    def _supervise(self) -> None:
        while not self._stop.is_set():
            self._process = subprocess.Popen(self._argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while self._process.poll() is None and not self._stop.is_set():
                time.sleep(0.2)
            self._stop.wait(0.5)

    def reconnect(self) -> None:
        """Start over (kubectl may keep a forward whose pod is gone); the supervisor starts a new one."""
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()

    def stop(self) -> None:
        self._stop.set()
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(10)
        self._thread.join(15)


def kubectl_apply(cluster: Cluster, objects: list[Json], namespace: str | None = None) -> None:
    """`kubectl apply -f -`, as a user applies manifests."""
    argv = [str(kubectl_path()), "--kubeconfig", str(cluster.kubeconfig), "apply", "-f", "-"]
    if namespace:
        argv += ["--namespace", namespace]
    subprocess.run(argv, input=yaml.safe_dump_all(objects), text=True, check=True, capture_output=True)


def _labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "postgres", "app.kubernetes.io/instance": name}


class ClusterDatabase(Database):
    """PostgreSQL in the cluster (kind): a one-replica StatefulSet with a volume (a deleted pod comes back
    with its data, and never next to its predecessor), a Service, and a port-forward for the test."""

    def __init__(self, cluster: Cluster, namespace: str, name: str, max_connections: int) -> None:
        self.cluster, self.namespace, self.name = cluster, namespace, name
        self.max_connections = max_connections
        self.password = secrets.token_urlsafe(16)
        self._apply()
        self._wait_ready()
        self.forward = PortForward(cluster, namespace, name, 5432)
        wait_until(f"postgres {name} through the port-forward", lambda: self._connects(self._url("postgres")), WAIT)

    def _apply(self) -> None:
        labels = _labels(self.name)
        args = ["-c", f"max_connections={self.max_connections}", "-c", "fsync=off", "-c", "synchronous_commit=off"]
        objects: list[Json] = [
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": self.name, "labels": labels},
             "stringData": {"password": self.password}},
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": self.name, "labels": labels},
             "spec": {"selector": labels, "ports": [{"name": "postgres", "port": 5432, "targetPort": 5432}]}},
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": self.name, "labels": labels},
             "spec": {
                 "serviceName": self.name, "replicas": 1, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "terminationGracePeriodSeconds": 10,
                     "containers": [{
                         "name": "postgres", "image": POSTGRES_IMAGE, "args": args,
                         "env": [
                             {"name": "POSTGRES_PASSWORD",
                              "valueFrom": {"secretKeyRef": {"name": self.name, "key": "password"}}},
                             {"name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata"},
                         ],
                         "ports": [{"name": "postgres", "containerPort": 5432}],
                         "readinessProbe": {"exec": {"command": ["pg_isready", "-h", "127.0.0.1", "-U", "postgres"]},
                                            "periodSeconds": 2},
                         "volumeMounts": [{"name": "data", "mountPath": "/var/lib/postgresql/data"}],
                     }],
                 }},
                 "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": labels}, "spec": {
                     "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}],
             }},
        ]  # fmt: skip
        kubectl_apply(self.cluster, objects, namespace=self.namespace)

    def _pod(self) -> Json | None:
        pods = rawapi.call(CoreV1Api(self.cluster.api).list_namespaced_pod, self.namespace,
                           label_selector=f"app.kubernetes.io/instance={self.name}")["items"]  # fmt: skip
        return pods[0] if pods else None

    def _wait_ready(self) -> None:
        def ready() -> bool:
            pod = self._pod()
            return bool(pod and not pod["metadata"].get("deletionTimestamp") and _pod_ready(pod))

        wait_until(f"postgres {self.name} to be ready", ready, WAIT)

    def _url(self, database: str, *, local: bool = True) -> str:
        host = f"127.0.0.1:{self.forward.port}" if local else f"{self.name}.{self.namespace}.svc.cluster.local:5432"
        return f"postgresql://postgres:{self.password}@{host}/{database}"

    @staticmethod
    def _connects(url: str) -> bool:
        try:
            with psycopg.connect(url, connect_timeout=3):
                return True
        except psycopg.OperationalError:
            return False

    def create_database(self, name: str) -> Urls:
        with psycopg.connect(self._url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return Urls(self._url(name, local=False), self._url(name))

    def restart(self) -> None:
        pod = self._pod()
        assert pod is not None
        uid = pod["metadata"]["uid"]
        rawapi.call(CoreV1Api(self.cluster.api).delete_namespaced_pod, pod["metadata"]["name"], self.namespace)
        wait_until("the postgres pod to be replaced", lambda: (p := self._pod()) and p["metadata"]["uid"] != uid, WAIT)
        self._wait_ready()
        self.forward.reconnect()
        wait_until("postgres through the port-forward again", lambda: self._connects(self._url("postgres")), WAIT)

    def server_log(self) -> str:
        pod = self._pod()
        return self.cluster.logs(self.namespace, pod["metadata"]["name"]) if pod else ""

    def stop(self) -> None:
        self.forward.stop()
        for kind in ("statefulset", "service", "secret", "pvc"):
            self.cluster.kubectl("-n", self.namespace, "delete", kind, "-l", f"app.kubernetes.io/instance={self.name}",
                                 "--wait=false", check=False)  # fmt: skip


def new_database(cluster: Cluster, namespace: str, name: str, max_connections: int) -> Database:
    """A PostgreSQL server reachable by the cluster's pods and by this process."""
    if cluster.mode == "kind":
        return ClusterDatabase(cluster, namespace, name, max_connections)
    return LocalDatabase(max_connections)


# -- the operator, installed with Helm ------------------------------------------------------------------------


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

    def __init__(self, cluster: Cluster, namespace: str, release: str, images: Images) -> None:
        self.cluster, self.namespace, self.release, self.images = cluster, namespace, release, images
        self.deployment = f"{release}-fireflow-operator"
        self.pool_namespaces: list[str] = []  # whose pools must be gone before the operator is uninstalled
        self._values_dir = Path(tempfile.mkdtemp(prefix="fireflow-e2e-values-"))

    def values(self) -> Json:
        values: Json = {
            "image": {"repository": self.images.operator_repository, "tag": self.images.operator_tag},
            "operator": {"resyncSeconds": 5, "migrationRetrySeconds": 3},
        }
        if self.cluster.mode != "kind":
            # Every local pod shares 127.0.0.1: kopf's liveness port (probed by number) gets a free one.
            values["operator"]["healthPort"] = free_port()
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


# -- watch events in resourceVersion order --------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Observed:
    """One watch event, reduced to what the scenarios order: one etcd, so resourceVersion is a total order."""

    rv: int
    kind: str
    type: str  # ADDED, MODIFIED, DELETED
    name: str
    image: str = ""
    replicas: int | None = None  # a StatefulSet's spec.replicas
    done: str = ""  # a Job's Complete/Failed condition that is True


def _observe(kind: str, event_type: str, obj: Json) -> Observed:
    meta, spec, status = obj["metadata"], obj.get("spec", {}), obj.get("status", {})
    pod_spec = spec.get("template", {}).get("spec", {}) if kind != "Pod" else spec
    containers = pod_spec.get("containers") or [{}]
    done = ",".join(c["type"] for c in status.get("conditions") or [] if c["status"] == "True"
                    and c["type"] in ("Complete", "Failed")) if kind == "Job" else ""  # fmt: skip
    return Observed(
        rv=int(meta["resourceVersion"]),
        kind=kind,
        type=event_type,
        name=meta["name"],
        image=str(containers[0].get("image", "")),
        replicas=spec.get("replicas") if kind == "StatefulSet" else None,
        done=done,
    )


class Recorder:
    """Pods, Jobs and StatefulSets of a namespace as watch events, from a list onwards (nothing missed
    unless the watch window expires, which `gaps` counts)."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self._events: list[Observed] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.gaps = 0
        listers: dict[str, Callable[..., Any]] = {
            "Pod": CoreV1Api(cluster.api).list_namespaced_pod,
            "Job": BatchV1Api(cluster.api).list_namespaced_job,
            "StatefulSet": AppsV1Api(cluster.api).list_namespaced_stateful_set,
        }
        self._threads = []
        for kind, lister in listers.items():
            start = self._list(kind, lister, namespace)
            thread = threading.Thread(target=self._watch, args=(kind, lister, namespace, start), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _list(self, kind: str, lister: Callable[..., Any], namespace: str) -> str:
        listing = rawapi.call(lister, namespace)
        with self._lock:
            self._events.extend(_observe(kind, "ADDED", item) for item in listing["items"])
        return str(listing["metadata"]["resourceVersion"])

    def _watch(self, kind: str, lister: Callable[..., Any], namespace: str, resource_version: str) -> None:
        while not self._stop.is_set():
            try:
                for event in rawapi.watch(lister, namespace, resource_version=resource_version, timeout_seconds=5,
                                          allow_watch_bookmarks=True, _request_timeout=30):  # fmt: skip
                    resource_version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        with self._lock:
                            self._events.append(_observe(kind, event["type"], event["object"]))
            except ApiException as error:
                if error.status == 410:
                    self.gaps += 1
                    resource_version = self._list(kind, lister, namespace)
                else:
                    self._stop.wait(0.5)
            except (urllib3.exceptions.HTTPError, OSError):
                self._stop.wait(0.5)

    def ordered(self) -> list[Observed]:
        with self._lock:
            return sorted(set(self._events))

    def first(self, what: str, predicate: Callable[[Observed], bool]) -> Observed:
        found = next((e for e in self.ordered() if predicate(e)), None)
        assert found is not None, f"no watch event shows {what}"
        return found

    def wait_for(self, what: str, predicate: Callable[[Observed], bool]) -> Observed:
        found: Observed = wait_until(what, lambda: next((e for e in self.ordered() if predicate(e)), None), WAIT)
        return found

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(15)


# -- the pool under test --------------------------------------------------------------------------------------


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
                "env": self.images.trace_env(),
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


def setup_stage(cluster: Cluster, namespace: str, database: Database, images: Images) -> Stage:
    """A fresh database with the trace table, and its Secret (the URL as the pods reach it)."""
    urls = database.create_database(f"e2e_{secrets.token_hex(6)}")
    with psycopg.connect(urls.local, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE public.e2e_trace (run_key text NOT NULL, label text NOT NULL,"
            " at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
    create_secret(cluster.api, namespace, urls.pods, name=SECRET)
    return Stage(cluster, namespace, urls, images)


# -- flows and runs -------------------------------------------------------------------------------------------


def greet_flow() -> Json:
    return {
        "name": "greet",
        "inputs": {"who": {"type": "string"}},
        "nodes": {
            "hello": {"type": "template", "params": {"template": "Hello, ${inputs.who}!"}},
            "card": {"type": "transform", "params": {"value": {"greeting": "${nodes.hello}", "to": "${inputs.who}"}}},
        },
        "outputs": ["card"],
    }


def greeting(who: str) -> Json:
    """What greet_flow returns for `who`."""
    return {"card": {"greeting": f"Hello, {who}!", "to": who}}


def sleep_flow(seconds: float) -> Json:
    return {"name": "nap", "nodes": {"nap": {"type": "sleep", "params": {"seconds": seconds}}}}


def trace_flow(key: str, seconds: float) -> Json:
    """first -> nap -> last: a python-node side effect before and after a durable sleep."""

    def record(label: str, after: list[str]) -> Json:
        node: Json = {"type": "python", "params": {"function": f"{TRACE_MODULE}:record",
                                                   "kwargs": {"key": key, "label": label}}}  # fmt: skip
        if after:
            node["after"] = after
        return node

    return {
        "name": "traced",
        "nodes": {
            "first": record("first", []),
            "nap": {"type": "sleep", "params": {"seconds": seconds}, "after": ["first"]},
            "last": record("last", ["nap"]),
        },
        "outputs": ["first", "nap", "last"],
    }


@dataclass(frozen=True)
class Run:
    status: str
    executor: str
    recovery_attempts: int


def runs(url: str, run_ids: list[str] | None = None) -> dict[str, Run]:
    """Every run's row in DBOS's workflow_status (or just `run_ids`')."""
    with psycopg.connect(url, connect_timeout=10) as conn:
        rows = conn.execute(
            "SELECT workflow_uuid, status, coalesce(executor_id, ''), coalesce(recovery_attempts, 0)"
            " FROM dbos.workflow_status"
        ).fetchall()
    found = {str(r[0]): Run(str(r[1]), str(r[2]), int(r[3])) for r in rows}
    return found if run_ids is None else {k: v for k, v in found.items() if k in set(run_ids)}


def wait_finished(url: str, run_ids: list[str], timeout: float = WAIT) -> dict[str, Run]:
    """Until every run has ended (no ENQUEUED or PENDING among them); the database may be away meanwhile."""

    def finished() -> dict[str, Run] | None:
        try:
            found = runs(url, run_ids)
        except psycopg.OperationalError:
            return None
        ended = len(found) == len(run_ids) and all(r.status not in ("ENQUEUED", "PENDING") for r in found.values())
        return found if ended else None

    result: dict[str, Run] = wait_until(f"{len(run_ids)} runs to end", finished, timeout)
    return result


def results(url: str, run_ids: list[str]) -> dict[str, Any]:
    """The results of ended runs (raises a run's error)."""
    with FireflowClient(url) as client:
        return {run_id: client.result(run_id) for run_id in run_ids}


def trace(url: str, key: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT label FROM public.e2e_trace WHERE run_key = %s ORDER BY at", (key,)).fetchall()
    return [str(r[0]) for r in rows]


def set_schema_behind(url: str) -> None:
    """Make the database need a migration again: the last three DBOS migrations are idempotent."""
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE dbos.dbos_migrations SET version = version - 3")


@contextlib.contextmanager
def table_lock(url: str) -> Iterator[psycopg.Connection[Any]]:
    """A session holding ACCESS SHARE on dbos.workflow_status in an open transaction (a long reader): every
    ALTER of that table waits for it."""
    holder = psycopg.connect(url)
    try:
        holder.execute("LOCK TABLE dbos.workflow_status IN ACCESS SHARE MODE")
        yield holder
    finally:
        holder.close()
