"""The release path: one version everywhere (pyproject.toml's), a chart that renders and lints without flags,
shows its README, refuses clusters older than it supports, and packages under that version (`.ci/release`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.chart.chart import CHART_DIR, HelmError, helm, one
from tests.chart.release import REPO_ROOT, mismatches, project_version
from tests.kube.tools import helm_path


def test_should_carry_the_project_version_everywhere_when_nothing_was_bumped_alone() -> None:
    assert mismatches() == []


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for name in ("pyproject.toml", "README.md"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / name, root / name)
    for folder in ("charts", "examples", "docs"):
        shutil.copytree(REPO_ROOT / folder, root / folder)
    return root


def test_should_name_every_place_out_of_step_when_only_pyproject_is_bumped(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(f'version = "{project_version()}"', 'version = "9.8.7"', 1))
    problems = mismatches(root)
    assert problems[:2] == [
        f"charts/fireflow-operator/Chart.yaml: version is '{project_version()}', the project's version is '9.8.7'",
        f"charts/fireflow-operator/Chart.yaml: appVersion is '{project_version()}', the project's version is '9.8.7'",
    ]
    assert f"examples/pool-minimal.yaml:11: fireflow-worker:{project_version()}, the project's version is '9.8.7'" in (
        problems
    )


def test_should_refuse_a_pinned_default_image_tag(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    values = root / "charts" / "fireflow-operator" / "values.yaml"
    values.write_text(values.read_text().replace('  tag: ""', '  tag: "0.0.9"', 1))
    assert mismatches(root) == [
        "charts/fireflow-operator/values.yaml: image.tag is '0.0.9'; leave it empty (appVersion)"
    ]


@pytest.mark.usefixtures("helm_bin")
def test_should_print_the_chart_readme_when_asked_for_it() -> None:
    assert helm("show", "readme", str(CHART_DIR)).strip() == (CHART_DIR / "README.md").read_text().strip()


@pytest.mark.usefixtures("helm_bin")
def test_should_render_and_lint_without_flags_with_the_project_version() -> None:
    objects = [doc for doc in yaml.safe_load_all(helm("template", "ff", str(CHART_DIR))) if doc]
    deployment = one(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"fireflow-operator:{project_version()}"
    assert deployment["metadata"]["labels"]["app.kubernetes.io/version"] == project_version()
    helm("lint", "--strict", str(CHART_DIR))


@pytest.mark.usefixtures("helm_bin")
@pytest.mark.parametrize("version", ["v1.28.9", "v1.25.0"])
def test_should_refuse_a_cluster_older_than_1_29_when_its_version_is_given(version: str) -> None:
    with pytest.raises(HelmError, match=rf"the chart needs Kubernetes 1.29 or later .*, not {version}; upgrade"):
        helm("template", "ff", str(CHART_DIR), "--kube-version", version)


@pytest.mark.usefixtures("helm_bin")
@pytest.mark.parametrize("version", ["v1.29.0", "v1.37.2"])
def test_should_render_for_a_supported_cluster(version: str) -> None:
    helm("template", "ff", str(CHART_DIR), "--kube-version", version)


@pytest.mark.usefixtures("helm_bin")
def test_should_package_the_chart_under_the_project_version(tmp_path: Path) -> None:
    result = subprocess.run(
        ["bash", str(REPO_ROOT / ".ci" / "release"), "--no-images", "--destination", str(tmp_path)],
        capture_output=True, text=True, check=False, timeout=300, env={**os.environ, "HELM": str(helm_path())},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    package = tmp_path / f"fireflow-operator-{project_version()}.tgz"
    assert f"[ci/release] chart: {package}" in result.stderr
    with tarfile.open(package) as archive:
        chart = yaml.safe_load(archive.extractfile("fireflow-operator/Chart.yaml").read())  # type: ignore[union-attr]
        names = archive.getnames()
    assert (chart["version"], chart["appVersion"]) == (project_version(), project_version())
    assert "fireflow-operator/README.md" in names
