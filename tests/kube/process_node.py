"""A node that plays the kubelet: pods become local processes on 127.0.0.1.

    node = ProcessNode(kubeconfig); node.start(); ...; node.stop()

It registers a Ready Node and keeps its Lease fresh (so the node-lifecycle controller never taints
it), binds every unscheduled Pod to itself (there is no scheduler: node selectors, affinities and
taints are not evaluated), and hands each bound Pod to a `PodWorker`. Each container's output is
kept under `workdir/pods/<namespace>_<pod>_<uid>/<container>.<run>.log`; `logs()` returns it,
including pods that are already deleted. Nothing here logs environment values or tokens.

What a process sees, compared with a container:
- its image comes from the table in `images.py`; its env is resolved as the kubelet does (`podenv.py`),
  plus PATH/HOME/TMPDIR/HOSTNAME, the image's port and bind-address variables, and
  FIREFLOW_TERMINATION_MESSAGE_PATH: a per-container file read as the termination message (a real
  kubelet reads `terminationMessagePath` inside the container, usually /dev/termination-log);
- a projected service-account token volume becomes KUBECONFIG: a kubeconfig holding a TokenRequest
  token bound to the Pod, so the API server applies the account's RBAC;
- not supported: other volumes, workingDir, securityContext, resource limits (not enforced),
  lifecycle hooks, sidecar (restartPolicy: Always) init containers, service-link env vars.
"""

from __future__ import annotations

import base64
import logging
import os
import platform
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import config as kube_config
from kubernetes.client import ApiClient, CoordinationV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from . import podenv, rawapi
from .netutil import LOOPBACK
from .pod_worker import PodWorker
from .tools import pins

Json = dict[str, Any]
log = logging.getLogger("fireflow.process_node")

LEASE_SECONDS = 40
RENEW_EVERY = 10.0
WATCH_SECONDS = 3  # how long a watch request lasts: bounds how long stop() waits for the watch thread
# The kubelet backs off 10 s doubling to 300 s; tests want crash loops visible in seconds.
DEFAULT_BACKOFF = (1.0, 30.0)


class ApiSources:
    """Secrets and ConfigMaps read live from the API server, as the kubelet does."""

    def __init__(self, core: CoreV1Api) -> None:
        self.core = core

    def _read(self, kind: str, namespace: str, name: str) -> Json | None:
        reader = self.core.read_namespaced_secret if kind == "secret" else self.core.read_namespaced_config_map
        try:
            return rawapi.call(reader, name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def secret(self, namespace: str, name: str) -> Mapping[str, str] | None:
        found = self._read("secret", namespace, name)
        return None if found is None else podenv.decode_secret_data(found.get("data"))

    def config_map(self, namespace: str, name: str) -> Mapping[str, str] | None:
        found = self._read("configmap", namespace, name)
        return None if found is None else dict(found.get("data") or {})


class ProcessNode:
    def __init__(
        self,
        kubeconfig: Path,
        workdir: Path | None = None,
        name: str = "process-node",
        backoff: tuple[float, float] = DEFAULT_BACKOFF,
    ) -> None:
        self.name = name
        self.backoff = backoff
        self._owns_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="fireflow-node-"))
        self.pods_dir = self.workdir / "pods"
        self.pods_dir.mkdir(parents=True, exist_ok=True)
        self.server, self.ca_file = self._cluster_of(kubeconfig)
        self.api: ApiClient = kube_config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        self.api.configuration.connection_pool_maxsize = 64
        self.core = CoreV1Api(self.api)
        self.sources: podenv.Sources = ApiSources(self.core)
        self._workers: dict[str, PodWorker] = {}
        self._finalized: set[str] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    def _cluster_of(self, kubeconfig: Path) -> tuple[str, Path]:
        """The API server URL and CA file that pod kubeconfigs point at."""
        config = yaml.safe_load(kubeconfig.read_text())
        contexts = {c["name"]: c["context"] for c in config["contexts"]}
        cluster_name = contexts[config["current-context"]]["cluster"]
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == cluster_name)
        if "certificate-authority-data" in cluster:
            ca_file = self.workdir / "ca.crt"
            ca_file.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
            return str(cluster["server"]), ca_file
        return str(cluster["server"]), Path(cluster["certificate-authority"])

    # -- lifecycle ----------------------------------------------------------------------------------------

    def start(self) -> None:
        self._register()
        for target, name in ((self._heartbeat, "heartbeat"), (self._watch_pods, "pod-watch")):
            thread = threading.Thread(target=target, name=f"{self.name}-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("node %s: ready", self.name)

    def stop(self, grace: float = 5.0) -> None:
        """Stop every pod process (SIGTERM, at most `grace` seconds, SIGKILL) and the node's threads."""
        self._stopping.set()
        with self._lock:
            workers = list(self._workers.values())
        for worker in workers:
            worker.shutdown(grace)
        for worker in workers:
            worker.join(grace + 15)
        for thread in self._threads:
            thread.join(WATCH_SECONDS + 10)
        self.api.close()  # type: ignore[no-untyped-call]
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- the Node object and its heartbeat ----------------------------------------------------------------

    def _register(self) -> None:
        version = pins()["KUBERNETES_VERSION"]
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64" if platform.machine() in ("x86_64", "AMD64") else platform.machine(),
            "fireflow.dev/process-node": "true",
        }
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.name, "labels": labels}, "spec": {}}
        try:
            rawapi.call(self.core.create_node, body)
        except ApiException as error:
            if error.status != 409:
                raise
        memory_kib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 1024
        resources = {"cpu": str(os.cpu_count() or 1), "memory": f"{memory_kib}Ki", "pods": "110",
                     "ephemeral-storage": "100Gi"}  # fmt: skip
        status = {
            "capacity": resources,
            "allocatable": resources,
            "addresses": [{"type": "InternalIP", "address": LOOPBACK}, {"type": "Hostname", "address": self.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": "process-node", "systemUUID": "process-node", "bootID": "process-node",
                "kernelVersion": platform.release(), "osImage": "fireflow process node",
                "containerRuntimeVersion": "process://local", "kubeletVersion": version,
                "kubeProxyVersion": version, "operatingSystem": "linux", "architecture": labels["kubernetes.io/arch"],
            },
            "conditions": self._conditions(),
        }  # fmt: skip
        rawapi.call(self.core.patch_node_status, self.name, {"status": status})
        self._renew_lease()

    def _conditions(self) -> list[Json]:
        now = _now(False)
        healthy = [("MemoryPressure", "KubeletHasSufficientMemory"), ("DiskPressure", "KubeletHasNoDiskPressure"),
                   ("PIDPressure", "KubeletHasSufficientPID")]  # fmt: skip
        conditions = [
            {"type": kind, "status": "False", "reason": reason, "lastHeartbeatTime": now, "lastTransitionTime": now}
            for kind, reason in healthy
        ]
        conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                           "message": "process node is posting ready status", "lastHeartbeatTime": now,
                           "lastTransitionTime": now})  # fmt: skip
        return conditions

    def _renew_lease(self) -> None:
        coordination = CoordinationV1Api(self.api)
        spec = {"holderIdentity": self.name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": _now(True)}
        try:
            rawapi.call(coordination.patch_namespaced_lease, self.name, "kube-node-lease", {"spec": spec})
        except ApiException as error:
            if error.status != 404:
                raise
            node = rawapi.call(self.core.read_node, self.name)
            owner = {"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": node["metadata"]["uid"]}
            body = {"metadata": {"name": self.name, "ownerReferences": [owner]}, "spec": spec}
            rawapi.call(coordination.create_namespaced_lease, "kube-node-lease", body)

    def _heartbeat(self) -> None:
        while not self._stopping.wait(RENEW_EVERY):
            try:
                self._renew_lease()
            except (ApiException, urllib3.exceptions.HTTPError) as error:
                log.warning("node %s: lease renewal failed: %s", self.name, error)

    # -- pods ---------------------------------------------------------------------------------------------

    def _watch_pods(self) -> None:
        resource_version = ""
        while not self._stopping.is_set():
            try:
                if not resource_version:
                    resource_version = self._relist()
                for event in self._events(resource_version):
                    obj = event["object"]
                    resource_version = obj["metadata"].get("resourceVersion", resource_version)
                    if event["type"] == "DELETED":
                        self._deleted(obj)
                    elif event["type"] in ("ADDED", "MODIFIED"):
                        self._handle(obj)
                    if self._stopping.is_set():
                        return
            except ApiException as error:
                if error.status != 410:
                    log.warning("node %s: pod watch failed: %s", self.name, error.reason)
                    self._stopping.wait(0.5)
                resource_version = ""  # relist: the watch window expired or the stream broke
            except (urllib3.exceptions.HTTPError, OSError) as error:
                if not self._stopping.is_set():
                    log.warning("node %s: pod watch interrupted: %s", self.name, error)
                    self._stopping.wait(0.5)
                resource_version = ""

    def _events(self, resource_version: str) -> Iterator[Json]:
        return rawapi.watch(
            self.core.list_pod_for_all_namespaces,
            resource_version=resource_version,
            timeout_seconds=WATCH_SECONDS,
            allow_watch_bookmarks=True,
            _request_timeout=WATCH_SECONDS + 10,
        )

    def _relist(self) -> str:
        listing = rawapi.call(self.core.list_pod_for_all_namespaces)
        present = set()
        for pod in listing.get("items", []):
            present.add(pod["metadata"]["uid"])
            self._handle(pod)
        with self._lock:
            missing = [w for uid, w in self._workers.items() if uid not in present]
        for worker in missing:
            worker.gone()
        return str(listing["metadata"]["resourceVersion"])

    def _handle(self, pod: Json) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        node_name = spec.get("nodeName")
        if not node_name:
            if (
                not meta.get("deletionTimestamp")
                and spec.get("schedulerName", "default-scheduler") == "default-scheduler"
            ):
                self._bind(pod)
            return
        if node_name != self.name:
            return
        uid = meta["uid"]
        with self._lock:
            if self._stopping.is_set() or uid in self._finalized:
                return
            worker = self._workers.get(uid)
            if worker is None:
                worker = PodWorker(self, pod)
                self._workers[uid] = worker
                worker.start()
                return
        worker.update(pod)

    def _deleted(self, pod: Json) -> None:
        with self._lock:
            worker = self._workers.get(pod["metadata"]["uid"])
        if worker is not None:
            worker.gone()

    def _bind(self, pod: Json) -> None:
        meta = pod["metadata"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.name},
        }
        try:
            rawapi.call(self.core.create_namespaced_pod_binding, meta["name"], meta["namespace"], binding)
            self.record_event(
                pod, "Normal", "Scheduled", f"Successfully assigned {meta['namespace']}/{meta['name']} to {self.name}"
            )
        except ApiException as error:
            if error.status not in (404, 409):  # gone, or bound meanwhile
                log.warning(
                    "node %s: binding %s/%s failed: %s", self.name, meta["namespace"], meta["name"], error.reason
                )

    # -- services for pod workers -------------------------------------------------------------------------

    def request_token(self, namespace: str, service_account: str, pod: Json, source: Json) -> str:
        """A token bound to the pod, as the kubelet requests for a projected serviceAccountToken volume."""
        meta = pod["metadata"]
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [source["audience"]] if source.get("audience") else [],
                "expirationSeconds": int(source.get("expirationSeconds", 3607)),
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
            },
        }
        response = rawapi.call(self.core.create_namespaced_service_account_token, service_account, namespace, request)
        return str(response["status"]["token"])

    def record_event(self, pod: Json, kind: str, reason: str, message: str) -> None:
        """A kubelet-style Event on the Pod (messages name things; they never carry values)."""
        meta = pod["metadata"]
        now = _now(False)
        event = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta["uid"]},
            "type": kind, "reason": reason, "message": message,
            "source": {"component": "kubelet", "host": self.name},
            "reportingComponent": "kubelet", "reportingInstance": self.name,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }  # fmt: skip
        try:
            rawapi.call(self.core.create_namespaced_event, meta["namespace"], event)
        except ApiException as error:
            log.debug(
                "node %s: event %s not recorded: %s", self.name, reason, error.reason
            )  # e.g. namespace terminating

    def worker_finished(self, worker: PodWorker) -> None:
        with self._lock:
            self._workers.pop(worker.uid, None)
            self._finalized.add(worker.uid)

    # -- output -------------------------------------------------------------------------------------------

    def logs(self, namespace: str, pod: str, container: str | None = None) -> str:
        """Every run's output of every container of every Pod so named (deleted ones included), oldest first."""
        chunks = []
        pod_dirs = sorted(self.pods_dir.glob(f"{namespace}_{pod}_*"), key=lambda p: p.stat().st_mtime)
        for pod_dir in pod_dirs:
            uid = pod_dir.name.rsplit("_", 1)[-1]
            logs = sorted(pod_dir.glob(f"{container or '*'}.*.log"), key=lambda p: p.stat().st_mtime)
            for log_file in logs:
                name, run, _ = log_file.name.rsplit(".", 2)
                chunks.append(f"==> {namespace}/{pod} (uid {uid}) container {name}, run {run} <==\n")
                chunks.append(log_file.read_text(errors="replace"))
        return "".join(chunks)


def _now(micro: bool) -> str:
    moment = datetime.now(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def main() -> None:
    """Run a node against an existing cluster until interrupted: `python -m tests.kube.process_node KUBECONFIG`."""
    import argparse  # noqa: PLC0415 - only the CLI needs it

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("kubeconfig", type=Path)
    parser.add_argument("--name", default="process-node")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    node = ProcessNode(args.kubeconfig, name=args.name)
    node.start()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        node.stop()


if __name__ == "__main__":
    main()
