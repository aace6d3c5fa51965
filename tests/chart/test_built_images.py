"""The images built from Dockerfile.worker and Dockerfile.operator (tests/kube/build-images.sh), run with Docker:
their entry points, a migration and a worker against a real PostgreSQL on 127.0.0.1 (`--network host`), the
operator refusing a bad setting, and the final stage's promises: uid 10001, no pip or compilers, a read-only
root filesystem. test_images.py checks the same Dockerfiles statically; these run what they build."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from fireflow_local.ports import free_port
from fireflow_local.postgres import LocalPostgres
from fireflow_worker import migrate
from fireflow_worker.client import FireflowClient
from tests.kube.engine import ProjectImages, docker

pytestmark = pytest.mark.docker
# What a kubelet gives the worker under the operator's pod spec: a read-only root with an emptyDir on /tmp,
# uid 10001, no capabilities, no privilege escalation.
HARDENED = ("--read-only", "--tmpfs", "/tmp", "--user", "10001:10001", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges")  # fmt: skip
TOOLS = ("pip", "pip3", "pip3.11", "easy_install", "gcc", "cc", "c++", "g++", "make", "as", "ld")


@pytest.fixture(params=["worker", "operator"])
def image(request: pytest.FixtureRequest, project_images: ProjectImages) -> str:
    return str(getattr(project_images, request.param))


@pytest.fixture(scope="module")
def server() -> Iterator[LocalPostgres]:
    with LocalPostgres(max_connections=50) as postgres:
        yield postgres


def run(image: str, *args: str, entrypoint: str | None = None, env: dict[str, str] | None = None,
        flags: tuple[str, ...] = HARDENED) -> subprocess.CompletedProcess[str]:  # fmt: skip
    argv = ["run", "--rm", "--network", "host", *flags]
    for key, value in (env or {}).items():
        argv += ["-e", f"{key}={value}"]
    if entrypoint is not None:
        argv += ["--entrypoint", entrypoint]
    return docker(*argv, image, *args, check=False, timeout=300)


def test_should_run_as_uid_10001_by_default(image: str) -> None:
    assert docker("image", "inspect", "--format", "{{.Config.User}}", image).stdout.strip() == "10001:10001"
    result = run(image, "-c", "id -u; id -g", entrypoint="/bin/sh", flags=())  # no --user: the image's own
    assert result.stdout.split() == ["10001", "10001"], result.stderr


def test_should_hold_no_pip_compiler_or_package_manager_in_the_final_stage(image: str) -> None:
    found = run(image, "-c", f"for t in {' '.join(TOOLS)}; do command -v $t; done; exit 0", entrypoint="/bin/sh")
    assert found.stdout.split() == [], f"tools in the image: {found.stdout.split()}"
    for module in ("pip", "setuptools"):
        result = run(image, "-c", f"import {module}", entrypoint="python")
        assert result.returncode == 1 and "ModuleNotFoundError" in result.stderr, (module, result.stderr)


def test_should_carry_the_contract_and_only_its_own_package(project_images: ProjectImages) -> None:
    """Each image holds fireflow_contract and its own package; neither carries the other's, nor its commands."""
    probe = "import importlib.util as u; print(*(bool(u.find_spec(m)) for m in {mods!r}))"
    for image, has, lacks, absent_command in (
        (project_images.worker, "fireflow_worker", "fireflow_operator", "fireflow-operator"),
        (project_images.operator, "fireflow_operator", "fireflow_worker", "fireflow-worker"),
    ):
        mods = ("fireflow_contract", has, lacks, "fireflow_local")
        result = run(image, "-c", probe.format(mods=mods), entrypoint="python")
        assert result.stdout.split() == ["True", "True", "False", "False"], (image, result.stdout, result.stderr)
        command = run(image, "-c", f"command -v {absent_command}; exit 0", entrypoint="/bin/sh")
        assert command.stdout.strip() == "", (image, command.stdout)


def test_should_print_usage_of_every_worker_command(project_images: ProjectImages) -> None:
    worker = project_images.worker
    for args, words in ((["--help"], "{run,migrate}"), (["migrate", "--help"], "--plan"), (["run", "--help"], "")):
        result = run(worker, *args)
        assert result.returncode == 0, (args, result.stderr)
        assert result.stdout.startswith("usage: fireflow-worker") and words in result.stdout, result.stdout
    client = run(worker, "--help", entrypoint="fireflow")
    assert client.returncode == 0 and client.stdout.startswith("usage: fireflow"), client.stderr


def test_should_list_the_operator_settings_on_help_and_refuse_arguments(project_images: ProjectImages) -> None:
    usage = run(project_images.operator, "--help")
    assert usage.returncode == 0 and usage.stdout.startswith("usage: fireflow-operator"), usage.stderr
    assert "FIREFLOW_OPERATOR_NAMESPACES" in usage.stdout and "FIREFLOW_OPERATOR_LOG_LEVEL" in usage.stdout
    refused = run(project_images.operator, "--namespace", "a")  # settings are environment variables only
    assert refused.returncode == 2 and "unrecognized arguments" in refused.stderr, refused


def test_should_refuse_a_bad_setting_with_exit_2_and_one_line(project_images: ProjectImages) -> None:
    operator = run(project_images.operator, env={"FIREFLOW_OPERATOR_RESYNC_SECONDS": "soon"})
    assert operator.returncode == 2, operator.stderr
    (line,) = operator.stderr.strip().splitlines()
    assert "FIREFLOW_OPERATOR_RESYNC_SECONDS" in line
    secret = "postgresql://fireflow:s3cret-pw@127.0.0.1:1/db"
    worker = run(project_images.worker, env={"DATABASE_URL_EXECUTIONS": secret, "DBOS_WORKER_CONCURRENCY": "0"})
    assert worker.returncode == 2, worker.stderr
    assert "DBOS_WORKER_CONCURRENCY" in worker.stderr and "s3cret-pw" not in worker.stdout + worker.stderr


def _summary(result: subprocess.CompletedProcess[str]) -> dict[str, object]:
    summary: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return summary


def test_should_plan_apply_and_plan_a_migration_from_the_worker_container(
    project_images: ProjectImages, server: LocalPostgres
) -> None:
    url = server.create_database("image_migrate")
    env = {"DATABASE_URL_EXECUTIONS": url}
    behind = run(project_images.worker, "migrate", "--plan", env=env)
    assert behind.returncode == 3, behind.stderr
    assert _summary(behind)["migration_needed"] is True
    applied = run(project_images.worker, "migrate", env=env)
    assert applied.returncode == 0, applied.stderr
    assert (_summary(applied)["action"], _summary(applied)["result"]) == ("apply", "ok"), applied.stdout
    current = run(project_images.worker, "migrate", "--plan", env=env)
    assert current.returncode == 0, current.stderr
    assert _summary(current)["migration_needed"] is False
    assert _summary(current)["current_version"] == _summary(current)["required_version"] == migrate.required_version()
    assert migrate.current_version(url) == migrate.required_version()
    for result in (behind, applied, current):
        assert server.password not in result.stdout + result.stderr


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def test_should_run_flows_on_a_read_only_root_and_drain_on_sigterm(
    project_images: ProjectImages, server: LocalPostgres
) -> None:
    url = server.create_database("image_worker")
    port = free_port()
    env = {"DATABASE_URL_EXECUTIONS": url, "FIREFLOW_HEALTH_HOST": "127.0.0.1", "FIREFLOW_HEALTH_PORT": str(port),
           "FIREFLOW_WORKER_ID": "image-test-0", "DBOS_QUEUE_POLLING_INTERVAL_MS": "50"}  # fmt: skip
    name = f"fireflow-image-test-{port}"
    argv = ["run", "-d", "--name", name, "--network", "host", *HARDENED]
    for key, value in env.items():
        argv += ["-e", f"{key}={value}"]
    docker(*argv, project_images.worker)
    try:
        deadline = time.monotonic() + 120
        while not _ready(port):
            state = docker("inspect", "--format", "{{.State.Running}}", name).stdout.strip()
            assert state == "true" and time.monotonic() < deadline, docker("logs", name, check=False).stderr[-3000:]
            time.sleep(0.5)
        flow = {"name": "hello", "nodes": {"hi": {"type": "template", "params": {"template": "hi ${inputs.who}"}}},
                "inputs": {"who": {"type": "string"}}}  # fmt: skip
        with FireflowClient(url) as client:
            run_id = client.enqueue(flow, inputs={"who": "image"})
            assert client.result(run_id) == {"hi": "hi image"}
        docker("stop", "--time", "30", name)  # SIGTERM: not ready, drain, exit 0
        assert docker("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip() == "0"
        logs = docker("logs", name).stdout + docker("logs", name).stderr
        assert server.password not in logs
    finally:
        docker("rm", "-f", name, check=False)
