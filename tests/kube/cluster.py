"""One interface over the two ways the tests get a cluster: local (Go-built control plane + process
node, here) and kind (real kubelets in Docker, `kind_cluster.py`)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType
from typing import Any

import urllib3
import yaml
from kubernetes import config as kube_config
from kubernetes.client import ApiClient, ApiextensionsV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from . import rawapi
from .controlplane import ControlPlane
from .images import TEST_IMAGE
from .process_node import ProcessNode
from .tools import REPO_ROOT, Binaries, kubectl_path

PROJECT_IMAGES = {"fireflow-worker": "Dockerfile.worker", "fireflow-operator": "Dockerfile.operator"}
LOG_TAIL_LINES = 200


def wait_for_service_account(core: CoreV1Api, namespace: str, name: str = "default", timeout: float = 60.0) -> None:
    """Pods are refused until the service-account controller has created the namespace's "default"."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            rawapi.call(core.read_namespaced_service_account, name, namespace)
            return
        except ApiException as error:
            if error.status != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


class KubectlError(subprocess.CalledProcessError):
    """A failed kubectl call that says what kubectl printed (CalledProcessError's text leaves stderr out)."""

    def __str__(self) -> str:
        said = (self.stderr or self.stdout or "").strip()
        return f"{super().__str__()}: {said[-2000:]}" if said else super().__str__()


def wait_until_established(api: ApiextensionsV1Api, name: str, timeout: float) -> None:
    """Poll a CRD until the API server serves it. A loaded control plane (three of them and kind on two cores in
    CI) may answer an early read with an error or take its time; the failure names the last thing it said."""
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        try:
            crd = rawapi.call(api.read_custom_resource_definition, name)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as error:  # refused, timed out, reset
            last = f"reading it failed: {getattr(error, 'reason', None) or error}"
        else:
            conditions = {c["type"]: c for c in (crd.get("status") or {}).get("conditions") or []}
            if conditions.get("Established", {}).get("status") == "True":
                return
            last = "; ".join(f"{t}={c['status']} ({c.get('message', '')})" for t, c in conditions.items()) or "none"
        time.sleep(0.5)
    raise TimeoutError(f"CRD {name} not Established after {timeout:.0f} s; its last conditions: {last}")


class LogFollower(ABC):
    """A container's output captured from now on (and, where the cluster keeps it, from before)."""

    @abstractmethod
    def text(self) -> str: ...

    def close(self) -> None:
        return None

    def __enter__(self) -> LogFollower:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class Cluster(ABC):
    mode: str
    kubeconfig: Path
    api: ApiClient

    @property
    def operator_kubeconfig(self) -> Path:
        """The kubeconfig an operator run as a process uses (local: a user of its own, for the audit log)."""
        return self.kubeconfig

    @abstractmethod
    def image(self, name: str) -> str:
        """The image reference for a project image (`fireflow-worker`, `fireflow-operator`)."""

    @abstractmethod
    def logs(self, namespace: str, pod: str) -> str:
        """Everything the pod's containers printed that the cluster still has."""

    @abstractmethod
    def follow_logs(self, namespace: str, pod: str) -> LogFollower: ...

    @abstractmethod
    def stop(self) -> None: ...

    def load(self, reference: str) -> None:
        """Make a local image available to the nodes (kind: `kind load`; the process node needs nothing)."""
        return

    test_image = TEST_IMAGE
    # Where pods reach a server of the test process, and the network their connections come from: the
    # process node's pods share 127.0.0.1; kind's come over kind's Docker network.
    host_address = "127.0.0.1"
    host_network = "127.0.0.1/32"

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        result = subprocess.run(
            [str(kubectl_path()), *args], env=env, capture_output=True, text=True, check=False, timeout=300
        )
        if check and result.returncode:
            raise KubectlError(result.returncode, result.args, result.stdout, result.stderr)
        return result

    def apply_crds(self, crd_dir: Path = REPO_ROOT / "crds", timeout: float = 300.0) -> list[Path]:
        """Apply every CRD manifest in `crd_dir` and wait until each is Established."""
        files = sorted(p for p in crd_dir.glob("*.y*ml") if p.suffix in (".yaml", ".yml")) if crd_dir.is_dir() else []
        for path in files:
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
            for crd in yaml.safe_load_all(path.read_text()):
                wait_until_established(ApiextensionsV1Api(self.api), crd["metadata"]["name"], timeout)
        return files

    def namespace_report(self, namespace: str) -> str:
        """Pods, their container states, events and output: what a failed test needs to be understood."""
        core = CoreV1Api(self.api)
        lines: list[str] = []
        try:
            pods = rawapi.call(core.list_namespaced_pod, namespace).get("items", [])
            events = rawapi.call(core.list_namespaced_event, namespace).get("items", [])
        except ApiException as error:
            return f"cannot read namespace {namespace}: {error.reason}"
        for pod in pods:
            meta, status = pod["metadata"], pod.get("status", {})
            lines.append(f"pod {meta['name']} phase={status.get('phase')} uid={meta['uid']}")
            for container in status.get("initContainerStatuses", []) + status.get("containerStatuses", []):
                lines.append(
                    f"  container {container['name']} ready={container.get('ready')} "
                    f"restarts={container.get('restartCount')} state={container.get('state')} "
                    f"last={container.get('lastState')}"
                )
        lines.append("events:")
        for event in events:
            involved = event.get("involvedObject", {})
            lines.append(
                f"  {involved.get('kind')}/{involved.get('name')}: {event.get('reason')} {event.get('message')}"
            )
        names = sorted({p["metadata"]["name"] for p in pods} | set(self._known_pods(namespace)))
        for name in names:
            output = self.logs(namespace, name).splitlines()[-LOG_TAIL_LINES:]
            lines.append(f"--- output of {name} (last {LOG_TAIL_LINES} lines) ---")
            lines.extend(output)
        return "\n".join(lines)

    def _known_pods(self, namespace: str) -> list[str]:
        return []


class _FileFollower(LogFollower):
    def __init__(self, node: ProcessNode, namespace: str, pod: str) -> None:
        self.node, self.namespace, self.pod = node, namespace, pod

    def text(self) -> str:
        return self.node.logs(self.namespace, self.pod)


class LocalCluster(Cluster):
    mode = "local"

    def __init__(self, binaries: Binaries | None = None, *, audit: bool = False) -> None:
        self.control_plane = ControlPlane(binaries, audit=audit)
        self.kubeconfig = self.control_plane.kubeconfig
        self.node: ProcessNode | None = None

    def start(self) -> LocalCluster:
        try:
            self.control_plane.start()
            self.api = kube_config.new_client_from_config(config_file=str(self.kubeconfig))  # type: ignore[no-untyped-call]
            self.node = ProcessNode(self.kubeconfig)
            self.node.start()
            wait_for_service_account(CoreV1Api(self.api), "default")
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def operator_kubeconfig(self) -> Path:
        return self.control_plane.operator_kubeconfig

    def image(self, name: str) -> str:
        return f"{name}:dev"  # any tag: the process node matches the basename

    def logs(self, namespace: str, pod: str) -> str:
        return self.node.logs(namespace, pod) if self.node else ""

    def follow_logs(self, namespace: str, pod: str) -> LogFollower:
        assert self.node is not None
        return _FileFollower(self.node, namespace, pod)

    def _known_pods(self, namespace: str) -> list[str]:
        if self.node is None:
            return []
        return [d.name.split("_")[1] for d in self.node.pods_dir.glob(f"{namespace}_*")]

    def stop(self) -> None:
        if self.node is not None:
            self.node.stop()
            self.node = None
        if hasattr(self, "api"):
            self.api.close()  # type: ignore[no-untyped-call]
        self.control_plane.stop()


class StreamFollower(LogFollower):
    """`kubectl logs -f` in a thread: keeps what a pod printed even after a real kubelet deleted it."""

    def __init__(self, api: ApiClient, namespace: str, pod: str) -> None:
        self._chunks: list[str] = []
        self._response: Any = CoreV1Api(api).read_namespaced_pod_log(
            pod, namespace, follow=True, _preload_content=False
        )
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            for chunk in self._response.stream(decode_content=False):
                self._chunks.append(chunk.decode("utf-8", errors="replace"))
        except Exception:  # the stream ends however the pod ends
            return

    def text(self) -> str:
        return "".join(self._chunks)

    def close(self) -> None:
        self._response.release_conn()
