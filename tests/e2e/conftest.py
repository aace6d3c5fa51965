"""Fixtures of the e2e scenarios: the cluster's adapter and images, one PostgreSQL server, one trace server and
one operator installed with Helm per module (shared by the scenarios, which are independent: each has its own
namespace and database), and the pool under test.

Teardown order matters: the operator's finalizer drains a deleted pool and hands its runs back through the
database, so pools go first (while the operator and the database are still there), then the operator,
then the database. `operator` depends on `database` for exactly that reason.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator

import pytest
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from tests.e2e.adapter import ClusterAdapter, Images, adapter_for
from tests.e2e.databases import Database
from tests.e2e.harness import (
    OperatorRelease,
    Stage,
    create_namespace,
    delete_namespace,
    force_finalize,
    setup_stage,
)
from tests.e2e.tracer import TraceServer
from tests.kube import rawapi
from tests.kube.cluster import Cluster
from tests.kube.tools import BUILD_SCRIPT, REPO_ROOT, helm_path, pins
from tests.support.pools import wait_until

DRAIN_WAIT = 180.0


@pytest.fixture(scope="session")
def adapter(kube_cluster: Cluster) -> ClusterAdapter:
    return adapter_for(kube_cluster)


@pytest.fixture(scope="session")
def e2e_images(adapter: ClusterAdapter) -> Images:
    return adapter.images()


def new_database(adapter: ClusterAdapter, max_connections: int) -> Database:
    return Database(max_connections, pod_host=adapter.host_address, pod_network=adapter.host_network)


@pytest.fixture(scope="module")
def database(adapter: ClusterAdapter) -> Iterator[Database]:
    """The module's PostgreSQL server (every scenario creates its own database on it)."""
    server = new_database(adapter, max_connections=300)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tracer(adapter: ClusterAdapter) -> Iterator[TraceServer]:
    server = TraceServer(adapter.host_address)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def operator(adapter: ClusterAdapter, e2e_images: Images, database: Database) -> Iterator[OperatorRelease]:
    if not helm_path().is_file():
        pytest.fail(
            f"helm {pins()['HELM_VERSION']} is missing at {helm_path()}; build it with: "
            f"{BUILD_SCRIPT.relative_to(REPO_ROOT)}",
            pytrace=False,
        )
    suffix = secrets.token_hex(3)
    namespace = f"fireflow-system-{suffix}"
    cluster = adapter.cluster
    create_namespace(cluster, namespace)
    release = OperatorRelease(adapter, namespace, f"ff-{suffix}", e2e_images)
    release.install()
    yield release
    _wait_drained(cluster, release.pool_namespaces)
    if release.installed():
        release.uninstall()
    delete_namespace(cluster, namespace)


def _wait_drained(cluster: Cluster, namespaces: list[str]) -> None:
    """Until the scenarios' namespaces are gone: their pools' finalizers need the operator and the database.
    Pools the operator could not finish deleting lose their finalizers (so nothing is left behind), and that
    is raised."""
    core = CoreV1Api(cluster.api)

    def remaining() -> list[str]:
        left = []
        for name in namespaces:
            try:
                rawapi.call(core.read_namespace, name)
                left.append(name)
            except ApiException as error:
                if error.status != 404:
                    raise
        return left

    try:
        wait_until(f"the scenarios' namespaces {namespaces} to be deleted", lambda: not remaining(), DRAIN_WAIT)
    except AssertionError:
        stuck = [pool for name in remaining() for pool in force_finalize(cluster, name)]
        if stuck:
            raise AssertionError(f"the operator did not finish deleting {stuck}; removed their finalizers") from None


@pytest.fixture(autouse=True)
def _operator_output(operator: OperatorRelease) -> Iterator[None]:
    yield
    print(f"--- operator output (tail) ---\n{operator.interesting_logs()}")  # shown by pytest for a failed test


@pytest.fixture
def stage(
    kube_cluster: Cluster,
    kube_namespace: str,
    database: Database,
    e2e_images: Images,
    tracer: TraceServer,
    operator: OperatorRelease,
) -> Iterator[Stage]:
    """A namespace, a fresh database on the module's server with its Secret; the pool is the test's to apply."""
    operator.pool_namespaces.append(kube_namespace)
    current = setup_stage(kube_cluster, kube_namespace, database, e2e_images, tracer)
    yield current
    current.close()
    current.delete_pool(wait=False)  # drained in the background; the namespace goes right after


@pytest.fixture
def dedicated_stage(
    adapter: ClusterAdapter, kube_namespace: str, e2e_images: Images, tracer: TraceServer, operator: OperatorRelease
) -> Iterator[Callable[[int], tuple[Database, Stage]]]:
    """Like `stage`, on a PostgreSQL server of the test's own (`max_connections` given), which the test may
    restart. The pool is deleted, and drained, before the server stops."""
    operator.pool_namespaces.append(kube_namespace)
    made: list[tuple[Database, Stage]] = []

    def make(max_connections: int) -> tuple[Database, Stage]:
        server = new_database(adapter, max_connections)
        try:
            current = setup_stage(adapter.cluster, kube_namespace, server, e2e_images, tracer)
        except BaseException:
            server.stop()
            raise
        made.append((server, current))
        return server, current

    yield make
    for server, current in made:
        try:
            current.close()
            current.delete_pool(wait=True)
        finally:
            server.stop()
