"""The Krew manifest of `kubectl fireflow` (charts/kubectl-fireflow/fireflow.yaml): Krew's Plugin kind, the
console script the package installs as its binary, the version of the package, and the sha256 of the archive
built from the repository, whose shim runs the plugin."""

from __future__ import annotations

import argparse
import io
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import yaml

from fireflow_operator.kubectl_plugin import cli
from tests.kube.tools import REPO_ROOT
from tests.support.krew import MANIFEST, SHIM, archive_bytes, archive_sha256

SEMVER = r"^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$"


def _project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    return project


def _manifest() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    return manifest


def test_should_be_a_krew_plugin_named_after_its_file_whose_binary_is_the_console_script() -> None:
    manifest = _manifest()
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert manifest["kind"] == "Plugin"
    assert manifest["metadata"]["name"] == MANIFEST.stem == "fireflow"  # `kubectl fireflow`
    spec = manifest["spec"]
    assert spec["shortDescription"] and len(spec["shortDescription"]) <= 50 and spec["description"]
    assert spec["platforms"]
    for platform in spec["platforms"]:
        assert platform["bin"] == "kubectl-fireflow" == SHIM.name
        assert _project()["scripts"][platform["bin"]] == "fireflow_operator.kubectl_plugin:main"
        assert {"from": SHIM.name, "to": "."} in platform["files"]
        labels = platform["selector"].get("matchLabels", {})
        expressions = platform["selector"].get("matchExpressions", [])
        assert labels or expressions


def test_should_name_the_packages_version_and_the_sha256_of_the_archive_built_here() -> None:
    spec = _manifest()["spec"]
    version = _project()["version"]
    assert re.fullmatch(SEMVER, spec["version"]) and spec["version"] == f"v{version}"
    for platform in spec["platforms"]:
        assert platform["uri"].startswith("https://") and platform["uri"].endswith(f"-v{version}.zip")
        assert platform["sha256"] == archive_sha256(), "rebuild: python -m tests.support.krew OUT.zip"
    pin = f"fireflow-pool[operator]=={version}"
    assert pin in spec["caveats"] and pin in SHIM.read_text()


def test_should_run_the_plugin_from_the_archive_or_say_how_to_install_it(tmp_path: Path) -> None:
    with zipfile.ZipFile(io.BytesIO(archive_bytes())) as archive:
        archive.extractall(tmp_path)
    shim = tmp_path / SHIM.name
    shim.chmod(0o755)  # zipfile does not restore the mode; Krew does
    env = {**os.environ, "FIREFLOW_PYTHON": sys.executable}
    ran = subprocess.run([str(shim), "--help"], capture_output=True, text=True, env=env, check=False)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("usage: kubectl fireflow") and "status" in ran.stdout
    without = subprocess.run(
        [str(shim), "list"], capture_output=True, text=True, env={**env, "FIREFLOW_PYTHON": "false"}, check=False
    )
    assert without.returncode == 1 and without.stdout == ""
    assert without.stderr.strip() == (
        f"error: false has no fireflow-pool package: pip install 'fireflow-pool[operator]=={_project()['version']}', "
        "or set FIREFLOW_PYTHON to an interpreter that has it"
    )


def _commands(parser: argparse.ArgumentParser, prefix: str) -> list[str]:
    """Every command line the plugin takes, `kubectl fireflow runs cancel` included."""
    choices = next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if not choices:
        return [prefix]
    return [line for name, sub in choices.items() for line in _commands(sub, f"{prefix} {name}")]


def test_should_describe_every_command_the_plugin_takes() -> None:
    description = " ".join(_manifest()["spec"]["description"].split())
    commands = _commands(cli.parser(), "kubectl fireflow")
    assert len(commands) == 7
    for command in commands:
        *group, last = command.split()
        # `kubectl fireflow runs list|cancel|resume` names the three
        assert re.search(rf"{re.escape(' '.join(group))} ([a-z]+\|)*{last}\b", description), command
