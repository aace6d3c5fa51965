"""A kind cluster for the tests (`--cluster=kind`), through pytest-kind, with the project's real images.

What `start` does, every step cached or a no-op when already done:
- a Docker engine (started when none runs; stopped again by `stop` when it was started here);
- `build-images.sh`: Dockerfile.worker and Dockerfile.operator on the Debian Python base made here (or on
  their pinned official base, `--image-base=official`);
- `build-kind-node.sh`: the offline node image at the control plane's Kubernetes version and the pinned
  kind CLI (or kind's own node image, `--kind-image=default`, or any other reference);
- the mends this machine needs (tests/kube/kind.py), a stale cluster of the same name deleted, the
  cluster created, the images loaded with `kind load docker-image`.
Pods reach servers of the test process (PostgreSQL, recorders) on the host's address on kind's Docker
network (`host_address`); nothing listens beyond that network and 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from pathlib import Path

import yaml
from kubernetes import config as kube_config
from kubernetes.client import CoreV1Api

from . import rawapi
from .cluster import Cluster, LogFollower, StreamFollower, wait_for_service_account
from .engine import ENGINE, ProjectImages, build_kind_node, build_project_images, kind_cli
from .kind import Mends, detect_mends, gateway, kind_command, kind_config, kind_nodes_running, remove_leftover_cgroups
from .tools import REPO_ROOT, kubectl_path

DEFAULT_NODE = "default"  # --kind-image=default: kind's own node image (where a registry is reachable)
OFFLINE_NODE = "offline"  # the node image build-kind-node.sh assembles (the default)
NODE_READY_WAIT = 300.0


class KindCluster(Cluster):
    mode = "kind"

    def __init__(
        self,
        name: str,
        keep: bool,
        kind_bin: str | None,
        node_image: str | None,
        image_base: str = "debian",
        test_images: bool = False,
    ) -> None:
        self.name, self.keep, self.image_base, self.test_images = name, keep, image_base, test_images
        self.kind_bin = Path(kind_bin) if kind_bin else None
        self.node_image = node_image or OFFLINE_NODE
        self.workdir = (REPO_ROOT / ".pytest-kind" / name).resolve()
        self.kubeconfig = self.workdir / "kubeconfig"
        self.mends: Mends | None = None
        self.images: ProjectImages | None = None
        self.host_address = self.host_network = ""
        self._kind: object | None = None
        self._engine_up = False

    def start(self) -> KindCluster:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        from pytest_kind import KindCluster as PytestKindCluster  # noqa: PLC0415 - kind mode only

        ENGINE.up()
        self._engine_up = True
        self.images = build_project_images(self.image_base, self.test_images)
        self.test_image = self.images.python
        offline = self.node_image == OFFLINE_NODE
        if offline:
            node = build_kind_node()
            image: str | None = node.image
            kind = self.kind_bin or node.kind
        else:
            image = None if self.node_image == DEFAULT_NODE else self.node_image
            kind = self.kind_bin or kind_cli()
        self.mends = detect_mends(self.images.python)
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "kind-config.yaml"
        config.write_text(yaml.safe_dump(kind_config(self.mends, offline_node=offline)))
        launcher = kind_command(kind, self.mends, self.workdir)
        handle = PytestKindCluster(
            self.name, kubeconfig=self.kubeconfig, image=image, kind_path=launcher, kubectl_path=kubectl_path()
        )
        self._kind = handle
        # pytest-kind reuses a cluster of the same name; one left by an interrupted run is not this run's.
        if self.name in subprocess.run([str(handle.kind_path), "get", "clusters"], capture_output=True, text=True,
                                       check=True).stdout.split():  # fmt: skip
            handle.delete()
        handle.create(config_file=config)
        images = self.images
        for reference in (
            images.worker,
            images.operator,
            images.python,
            images.older_dbos_worker,
            images.crashing_worker,
        ):
            if reference is not None:
                handle.load_docker_image(reference)
        self.api = kube_config.new_client_from_config(config_file=str(self.kubeconfig))  # type: ignore[no-untyped-call]
        self.host_address, self.host_network = gateway()
        self._wait_node_ready()
        wait_for_service_account(CoreV1Api(self.api), "default")

    def _wait_node_ready(self) -> None:
        core = CoreV1Api(self.api)
        deadline = time.monotonic() + NODE_READY_WAIT
        while True:
            nodes = rawapi.call(core.list_node)["items"]
            conditions = [c for n in nodes for c in n.get("status", {}).get("conditions", []) if c["type"] == "Ready"]
            if conditions and all(c["status"] == "True" for c in conditions):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the kind node is not Ready after {NODE_READY_WAIT:.0f} s: {conditions}")
            time.sleep(1)

    def load(self, reference: str) -> None:
        """`kind load docker-image` of one more local image."""
        handle = self._kind
        assert handle is not None
        handle.load_docker_image(reference)  # type: ignore[attr-defined]

    def node_image_id(self, reference: str) -> str:
        """The id of the image `reference` as the node's containerd has it (what its containers run)."""
        node = f"{self.name}-control-plane"
        found = subprocess.run(["docker", "exec", node, "crictl", "inspecti", "-o", "json", reference],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        return str(json.loads(found)["status"]["id"])

    def image(self, name: str) -> str:
        assert self.images is not None
        found = {
            "fireflow-worker": self.images.worker,
            "fireflow-operator": self.images.operator,
            "fireflow-worker-older-dbos": self.images.older_dbos_worker,
            "fireflow-worker-crashing": self.images.crashing_worker,
        }[name]
        if found is None:
            raise LookupError(f"{name} was not built for this cluster (KindCluster(test_images=True) builds it)")
        return found

    def logs(self, namespace: str, pod: str) -> str:
        chunks = []
        for previous in (True, False):
            result = self.kubectl(
                "logs", "-n", namespace, pod, "--all-containers", f"--previous={previous}", check=False
            )
            if result.returncode == 0 and result.stdout:
                chunks.append(f"==> {namespace}/{pod} ({'previous' if previous else 'current'}) <==\n{result.stdout}")
        return "".join(chunks)

    def follow_logs(self, namespace: str, pod: str) -> LogFollower:
        return StreamFollower(self.api, namespace, pod)

    def stop(self) -> None:
        if hasattr(self, "api"):
            self.api.close()  # type: ignore[no-untyped-call]
        handle = self._kind
        if handle is not None and not self.keep:
            with contextlib.suppress(subprocess.CalledProcessError):  # never made: nothing to delete
                handle.delete()  # type: ignore[attr-defined]
            if self.mends is not None and self.mends.unprivileged_node and not kind_nodes_running():
                remove_leftover_cgroups()
        if self._engine_up and not self.keep:
            ENGINE.down()
