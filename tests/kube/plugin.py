"""pytest plugin: a session-wide cluster, a namespace per test, and pod output in failure reports.

Enable with `-p tests.kube.plugin` (or `pytest_plugins`). Fixtures:
  kube_cluster    the session's `Cluster` (local: Go-built control plane + process node; kind: `--cluster=kind`)
  kube_api        a kubernetes `ApiClient` with admin rights on it
  kube_namespace  a fresh namespace for the test (deleted afterwards, without waiting)
Tests that use them are marked `controlplane` automatically; `-m 'not controlplane'` skips them.
Local mode fails (never skips) with one line naming the build script when the binaries are missing; kind
mode (`--cluster=kind`, see kind_cluster.py) builds what it needs and fails with one line when it cannot.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Generator, Iterator

import pytest
from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

from . import rawapi
from .cluster import Cluster, LocalCluster, wait_for_service_account
from .engine import BASES, ENGINE, ProjectImages, ScriptError, build_project_images
from .kind import CLUSTER_PREFIX
from .tools import Binaries, MissingBinariesError

CLUSTER_ENV = "FIREFLOW_TEST_CLUSTER"
IMAGE_BASE_ENV = "FIREFLOW_IMAGE_BASE"
PYTEST_KIND_DEFAULT_NAME = "pytest-kind"  # pytest-kind's --cluster-name default; ours is below
KIND_CLUSTER_NAME = f"{CLUSTER_PREFIX}pool"
CLUSTER_KEY = pytest.StashKey[Cluster]()
NAMESPACE_KEY = pytest.StashKey[str]()
CLUSTER_FIXTURES = {"kube_cluster", "kube_api", "kube_namespace"}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fireflow-kube", "Kubernetes test cluster")
    group.addoption(
        "--cluster",
        choices=("local", "kind"),
        default=os.environ.get(CLUSTER_ENV, "local"),
        help=f"local: Go-built control plane + process node (default); kind: a kind cluster in Docker "
        f"(env {CLUSTER_ENV})",
    )
    group.addoption(
        "--image-base",
        choices=BASES,
        default=os.environ.get(IMAGE_BASE_ENV, "debian"),
        help="the PYTHON_IMAGE the project's images are built on: debian (made here from Debian packages, no "
        f"registry; default) or official (the Dockerfiles' pinned python image) (env {IMAGE_BASE_ENV})",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "controlplane: needs the Kubernetes control plane (opt out with -m 'not controlplane')"
    )
    config.addinivalue_line("markers", "docker: needs Docker and the project's images (built when missing)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    on_kind = config.getoption("--cluster") == "kind"
    for item in items:
        if not on_kind and item.get_closest_marker("kind"):
            item.add_marker(pytest.mark.skip(reason="checks what only a kind cluster has: run with --cluster=kind"))
        fixtures = set(getattr(item, "fixturenames", ()))
        if CLUSTER_FIXTURES & fixtures:
            item.add_marker(pytest.mark.controlplane)
        if "project_images" in fixtures:
            item.add_marker(pytest.mark.docker)


def _start_cluster(config: pytest.Config) -> Cluster:
    if config.getoption("--cluster") == "kind":
        from .kind_cluster import KindCluster  # noqa: PLC0415 - kind mode only (pytest-kind, Docker)

        name = config.getoption("cluster_name", None)
        try:
            return KindCluster(
                name=KIND_CLUSTER_NAME if name in (None, PYTEST_KIND_DEFAULT_NAME) else str(name),
                keep=bool(config.getoption("keep_cluster", False)),
                kind_bin=config.getoption("kind_bin", None),
                node_image=config.getoption("kind_image", None),
                image_base=str(config.getoption("--image-base")),
                test_images=True,
            ).start()
        except ScriptError as error:
            failure = str(error)
        pytest.fail(failure, pytrace=False)
    try:
        binaries = Binaries.locate()
    except MissingBinariesError as error:
        missing = str(error)
    else:
        # The audit log costs a line per request; the idle tests count the operator's requests in it.
        return LocalCluster(binaries, audit=True).start()
    pytest.fail(missing, pytrace=False)  # outside the except: the report stays one line


@pytest.fixture(scope="session")
def kube_cluster(pytestconfig: pytest.Config) -> Iterator[Cluster]:
    cluster = _start_cluster(pytestconfig)
    pytestconfig.stash[CLUSTER_KEY] = cluster
    try:
        cluster.apply_crds()
        yield cluster
    finally:
        del pytestconfig.stash[CLUSTER_KEY]
        cluster.stop()


@pytest.fixture(scope="session")
def project_images(pytestconfig: pytest.Config) -> Iterator[ProjectImages]:
    """Dockerfile.worker and Dockerfile.operator built by tests/kube/build-images.sh (a no-op when unchanged)."""
    try:
        ENGINE.up()
    except ScriptError as error:
        failure = str(error)
    else:
        try:
            # With the e2e's test images: the kind cluster of the same run asks for them, and this is one build.
            images = build_project_images(str(pytestconfig.getoption("--image-base")), test_images=True)
        except ScriptError as error:
            ENGINE.down()
            failure = str(error)
        else:
            yield images
            ENGINE.down()
            return
    pytest.fail(failure, pytrace=False)


@pytest.fixture
def kube_api(kube_cluster: Cluster) -> ApiClient:
    return kube_cluster.api


@contextlib.contextmanager
def fresh_namespace(cluster: Cluster, name: str) -> Iterator[str]:
    """Create a labelled namespace, wait for its default ServiceAccount, delete it afterwards (not waiting)."""
    core = CoreV1Api(cluster.api)
    rawapi.call(core.create_namespace, {"metadata": {"name": name, "labels": {"fireflow.dev/test": "true"}}})
    wait_for_service_account(core, name)
    try:
        yield name
    finally:
        try:
            rawapi.call(core.delete_namespace, name)
        except ApiException as error:
            if error.status != 404:
                raise


@pytest.fixture
def kube_namespace(kube_cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    with fresh_namespace(kube_cluster, f"{slug}-{secrets.token_hex(3)}") as name:
        request.node.stash[NAMESPACE_KEY] = name
        yield name


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    namespace = item.stash.get(NAMESPACE_KEY, None)
    cluster = item.config.stash.get(CLUSTER_KEY, None)
    if report.failed and namespace and cluster is not None:
        report.sections.append((f"cluster: namespace {namespace}", cluster.namespace_report(namespace)))
    return report
