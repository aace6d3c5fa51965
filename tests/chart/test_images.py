"""The Dockerfiles name only things that exist, and agree with the chart, the operator and the test harness:
every COPY source is in the repo and in the build context, every extra and entry point is in pyproject.toml,
the final stage is the venv alone under uid 10001, and the images' commands and ports are the ones the chart,
the operator's builders and tests/kube expect. (Docker itself is not needed: nothing is built here.)"""

from __future__ import annotations

import re
import shlex
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from fireflow_operator.api import names
from fireflow_operator.api.model import parse_spec
from fireflow_operator.children import builders
from fireflow_operator.children.builders import Pool
from fireflow_operator.settings import OperatorSettings, load_settings
from tests.chart.chart import CHART_DIR
from tests.kube import images
from tests.kube.cluster import PROJECT_IMAGES
from tests.kube.tools import REPO_ROOT

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
DOCKERFILES = {"fireflow-worker": "Dockerfile.worker", "fireflow-operator": "Dockerfile.operator"}
EXTRAS = {"fireflow-worker": "worker", "fireflow-operator": "operator"}
BASE = re.compile(r"^python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}$")
VENV = "/opt/fireflow"


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, instruction: str) -> list[str]:
        return [args for op, args in self.instructions if op == instruction]


def parse(path: Path) -> list[Stage]:
    """Stages of a Dockerfile: continuation lines joined, comments dropped, global ARG defaults substituted."""
    text = re.sub(r"\\\n", " ", path.read_text())
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        op, rest = op.upper(), rest.strip()
        if op == "ARG" and not stages:
            key, _, default = rest.partition("=")
            args[key] = default
            continue
        rest = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), rest)
        if op == "FROM":
            base, _, alias = rest.partition(" AS ")
            stages.append(Stage(base=base.strip(), name=alias.strip() or None))
        else:
            stages[-1].instructions.append((op, rest))
    return stages


def dockerignore_excludes(relative: str) -> bool:
    """Docker's .dockerignore rules: the last pattern matching the path or one of its parents wins."""
    parts = relative.strip("/").split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for raw in (REPO_ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        regex = re.escape(pattern).replace(r"\*\*/", "(.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        regex = regex.replace(r"\?", "[^/]").replace(r"\[", "[").replace(r"\]", "]")
        if any(re.fullmatch(regex, candidate) for candidate in candidates):
            excluded = not negate
    return excluded


def _json_array(args: str) -> list[str]:
    parsed = yaml.safe_load(args)
    assert isinstance(parsed, list), f"use the exec form: {args}"
    return [str(item) for item in parsed]


@pytest.fixture(params=sorted(DOCKERFILES), ids=sorted(DOCKERFILES))
def image(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_should_build_each_project_image_the_harness_knows_from_its_dockerfile() -> None:
    assert PROJECT_IMAGES == DOCKERFILES
    for dockerfile in DOCKERFILES.values():
        assert (REPO_ROOT / dockerfile).is_file()


def test_should_pin_the_same_base_by_tag_and_digest_in_every_stage(image: str) -> None:
    stages = parse(REPO_ROOT / DOCKERFILES[image])
    assert len(stages) == 2, "one build stage, one final stage"
    for stage in stages:
        assert BASE.match(stage.base), f"{stage.base} is not python:3.11.x-slim-bookworm@sha256:<digest>"
    assert stages[0].base == stages[1].base, "the venv's interpreter path must exist in the final stage"
    bases = {parse(REPO_ROOT / d)[0].base for d in DOCKERFILES.values()}
    assert len(bases) == 1, "worker and operator share one base"


def test_should_copy_only_existing_paths_that_the_build_context_keeps(image: str) -> None:
    build = parse(REPO_ROOT / DOCKERFILES[image])[0]
    sources: list[str] = []
    for args in build.all("COPY"):
        words = [w for w in shlex.split(args) if not w.startswith("--")]
        sources += words[:-1]
    assert sources, "the build stage copies the sources"
    for source in sources:
        assert (REPO_ROOT / source).exists(), f"COPY {source}: no such path in the repo"
        assert not dockerignore_excludes(source), f"COPY {source}: .dockerignore keeps it out of the build context"
    # The wheel's metadata needs these (setuptools reads README.md); each image copies its own package's
    # sources and the contract's (worker/fireflow_contract/), never worker/fireflow_local (development only).
    assert {"pyproject.toml", "README.md", ".ci/constraints.txt"} <= set(sources)
    contract, worker, operator = "worker/fireflow_contract/", "worker/fireflow_worker/", "operator/"
    own = {"fireflow-worker": {contract, worker}, "fireflow-operator": {contract, operator}}[image]
    assert own <= set(sources) and not ({"worker/", worker, operator} - own) & set(sources), sources
    assert PYPROJECT["project"]["readme"] == "README.md"
    assert set(PYPROJECT["tool"]["setuptools"]["packages"]["find"]["where"]) == {"worker", "operator"}


def test_should_keep_local_state_out_of_the_build_context() -> None:
    for path in (".venv/bin/python", ".git/HEAD", "tests/conftest.py", "charts/fireflow-operator/Chart.yaml",
                 "benchmarks", "examples/demo.py", ".pytest-kind", "kind-logs",
                 "worker/fireflow_worker/__pycache__/cli.cpython-311.pyc", "fireflow_pool.egg-info/PKG-INFO",
                 ".mypy_cache", "Dockerfile.worker"):  # fmt: skip
        assert dockerignore_excludes(path), f"{path} would be sent to the Docker daemon"
    assert not dockerignore_excludes("worker/fireflow_worker/cli.py")


def test_should_install_the_wheel_with_its_extra_and_the_pinned_constraints(image: str) -> None:
    build = parse(REPO_ROOT / DOCKERFILES[image])[0]
    installs = [args for args in build.all("RUN") if "pip install" in args]
    assert len(installs) == 1
    words = shlex.split(installs[0])
    extra = EXTRAS[image]
    assert f".[{extra}]" in words, f"installs the wheel with the {extra} extra"
    assert extra in PYPROJECT["project"]["optional-dependencies"]
    constraints = words[words.index("-c") + 1]
    assert (REPO_ROOT / constraints).is_file()
    assert f"{VENV}/bin/pip" == words[0], "into the venv that the final stage copies"
    pinned = {
        line.split("==")[0].lower().replace("_", "-")
        for line in (REPO_ROOT / constraints).read_text().split()
        if "==" in line
    }
    wanted = PYPROJECT["project"]["dependencies"] + PYPROJECT["project"]["optional-dependencies"][extra]
    for requirement in wanted:
        name = re.split(r"[\[=<>!~ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        assert name in pinned, f"{requirement} is not pinned in {constraints}"


def test_should_ship_only_the_venv_as_uid_10001_in_the_final_stage(image: str) -> None:
    final = parse(REPO_ROOT / DOCKERFILES[image])[-1]
    copies = final.all("COPY")
    assert copies == [f"--from=build {VENV} {VENV}"], "the final stage copies the venv and nothing else"
    for args in final.all("RUN"):
        assert "pip install" not in args and "apt-get" not in args, f"the final stage installs nothing: {args}"
        assert "pip uninstall" in args, "the base image's pip leaves the final stage"
    assert final.all("USER") == ["10001:10001"]
    assert builders.WORKER_UID == 10001
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert values["podSecurityContext"]["runAsUser"] == values["securityContext"]["runAsUser"] == 10001
    (env,) = final.all("ENV")
    assert f"PATH={VENV}/bin:$PATH" in env


def test_should_enter_through_the_console_script_of_its_package(image: str) -> None:
    final = parse(REPO_ROOT / DOCKERFILES[image])[-1]
    (entrypoint,) = final.all("ENTRYPOINT")
    assert _json_array(entrypoint) == [image]
    scripts = PYPROJECT["project"]["scripts"]
    assert image in scripts, f"{image} is not a console script in pyproject.toml"
    module, _, function = scripts[image].partition(":")
    package_dir = "worker" if module.startswith("fireflow_worker") else "operator"
    source = REPO_ROOT / package_dir / (module.replace(".", "/") + ".py")
    assert re.search(rf"^def {function}\(", source.read_text(), re.MULTILINE), f"{scripts[image]} does not exist"
    # The process node's table runs the same console script for this image.
    local = images.lookup(f"{image}:dev")
    assert Path(local.entrypoint[0]).name == image


def test_should_expose_the_ports_the_chart_and_the_operator_use() -> None:
    worker = parse(REPO_ROOT / "Dockerfile.worker")[-1]
    assert worker.all("EXPOSE") == [str(names.HEALTH_PORT)]
    assert _json_array(worker.all("CMD")[0]) == ["run"]
    operator = parse(REPO_ROOT / "Dockerfile.operator")[-1]
    defaults = load_settings({})
    assert operator.all("EXPOSE") == [f"{defaults.metrics_port} {defaults.health_port}"]
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert (values["metrics"]["port"], values["operator"]["healthPort"]) == (
        defaults.metrics_port,
        defaults.health_port,
    )


def test_should_run_the_commands_the_chart_and_the_builders_give_the_images() -> None:
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert images.basename(values["image"]["repository"]) == "fireflow-operator"
    deployment = (CHART_DIR / "templates" / "deployment.yaml").read_text()
    assert 'command: ["fireflow-operator"]' in deployment
    spec = parse_spec({"image": "fireflow-worker:1", "database": {"secretRef": {"name": "db"}}})
    pool = Pool(name="p", namespace="ns", uid="u", spec=spec)
    statefulset = builders.build_statefulset(pool, image="fireflow-worker:1", application_version="1", replicas=1)
    job = builders.build_migration_job(
        pool, mode="apply", image="fireflow-worker:1", target="t", round_=0, database_label="db"
    )
    worker_entrypoint = _json_array(parse(REPO_ROOT / "Dockerfile.worker")[-1].all("ENTRYPOINT")[0])
    for pod in (statefulset["spec"]["template"]["spec"], job["spec"]["template"]["spec"]):
        (container,) = pod["containers"]
        assert container["command"] == worker_entrypoint
        assert container["securityContext"]["runAsUser"] == 10001
        assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_should_tag_images_with_the_project_version_everywhere() -> None:
    version = PYPROJECT["project"]["version"]
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert chart["appVersion"] == version, "Chart.yaml appVersion is the images' default tag"
    for name in ("pool-minimal.yaml", "pool-production.yaml"):
        for doc in yaml.safe_load_all((REPO_ROOT / "examples" / name).read_text()):
            if doc and doc["kind"] == "FireflowWorkerPool":
                assert doc["spec"]["image"] == f"fireflow-worker:{version}", name


def test_should_show_the_operator_settings_on_help_instead_of_starting() -> None:
    # The image's ENTRYPOINT is this console script: `docker run fireflow-operator --help` must not start an
    # operator (it did, ignoring every argument), and an argument is refused (settings are environment only).
    script = images.lookup("fireflow-operator:dev").entrypoint[0]
    usage = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert usage.returncode == 0, usage.stderr
    for setting in OperatorSettings.model_fields.values():
        assert f"  {setting.alias}  " in usage.stdout
    refused = subprocess.run([script, "--namespaces", "a"], capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 2 and "unrecognized arguments" in refused.stderr
